package controller

import (
	"slices"
	"testing"
	"time"
)

// The node's delayQueue tests cover the type in full; this copy is checked for what
// the audit log relies on: nothing is sent by Add, Close sends it all in order.
func TestDelayQueueClose(t *testing.T) {
	var got []int
	q := newDelayQueue(time.Hour, func(m int) { got = append(got, m) })
	for i := range 3 {
		q.Add(i)
	}
	if len(got) != 0 {
		t.Fatalf("sent during Add: %v", got)
	}
	q.Close()
	q.Add(3)
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("sent %v", got)
	}
}
