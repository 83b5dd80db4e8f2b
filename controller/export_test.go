package controller

// SetFollowBuffer sets how many live messages a stream holds for a slow client
// (tests make it tiny to force the catch-up path) and returns the restore func.
func SetFollowBuffer(n int) (restore func()) {
	old := followBuffer
	followBuffer = n
	return func() { followBuffer = old }
}
