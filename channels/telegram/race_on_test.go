//go:build race

package telegram_test

// raceBuild: the race detector's instrumentation makes frames, and so stacks, larger.
const raceBuild = true
