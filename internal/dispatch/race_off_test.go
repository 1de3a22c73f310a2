//go:build !race

package dispatch_test

// raceEnabled shortens the long property tests under the race detector.
const raceEnabled = false
