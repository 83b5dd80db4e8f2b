//go:build !race

package session

// raceEnabled: the test binary runs with the race detector.
const raceEnabled = false
