//go:build !race

package harness_test

const raceBuild = false
