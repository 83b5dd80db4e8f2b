package httpapi

import (
	"net/http"
	"sync"

	"github.com/fleetmux/fleetmux/api"
)

// MaxPrincipalStreams bounds the streams one principal holds open at once on a
// controller: attach and live WebSockets and output?follow=1. Each may queue
// megabytes for a client that stops reading (a live viewer up to
// liveMaxBehind), so one token opening streams by the hundred on a busy
// session could exhaust the controller's memory; past this the next is
// refused with CodeLimit.
const MaxPrincipalStreams = 64

// streamCount counts the open streams of each principal.
type streamCount struct {
	mu sync.Mutex
	n  map[string]int
}

// takeStream counts a new stream of r's principal and returns its release, or
// refuses it when the principal holds MaxPrincipalStreams already.
func (s *Server) takeStream(r *http.Request) (release func(), err *api.Error) {
	who := callerOf(r.Context()).principal
	c := &s.streams
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if c.n[who] >= MaxPrincipalStreams {
		return nil, api.Errorf(api.CodeLimit, "%s holds %d streams open (attach, live, follow) on this controller: close one first", who, MaxPrincipalStreams)
	}
	c.n[who]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[who]--; c.n[who] <= 0 {
				delete(c.n, who)
			}
		})
	}, nil
}
