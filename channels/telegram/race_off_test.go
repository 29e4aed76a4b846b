//go:build !race

package telegram_test

const raceBuild = false
