//go:build race

package harness

// raceOn tells the package's internal tests whether the race detector is on.
const raceOn = true
