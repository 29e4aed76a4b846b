//go:build race

package harness_test

// raceBuild: the race detector's instrumentation makes frames, and so stacks, larger.
const raceBuild = true
