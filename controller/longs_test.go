package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// TestLongs: an actor holds at most MaxLongPerPrincipal long requests on a node; a
// request whose caller left keeps its slot until its timeout.
func TestLongs(t *testing.T) {
	l := newLongs()
	ctx := context.Background()
	var releases []func()
	for range MaxLongPerPrincipal {
		r, err := l.acquire(ctx, "v", "n1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	var ae *api.Error
	if _, err := l.acquire(ctx, "v", "n1", time.Minute); !errors.As(err, &ae) || ae.Code != api.CodeBusy {
		t.Fatalf("one more: %v, want busy", err)
	}
	for _, k := range []struct{ actor, node string }{{"other", "n1"}, {"v", "n2"}} {
		r, err := l.acquire(ctx, k.actor, k.node, time.Minute)
		if err != nil {
			t.Fatalf("%s on %s: %v", k.actor, k.node, err)
		}
		r()
	}
	releases[0]() // ended: the slot is back at once
	r, err := l.acquire(ctx, "v", "n1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r()
	// A caller that left: the slot comes back when the request's timeout passes.
	left, cancel := context.WithCancel(ctx)
	r, err = l.acquire(left, "v", "n1", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	r()
	if _, err := l.acquire(ctx, "v", "n1", time.Minute); err == nil {
		t.Fatal("a left caller's slot came back before its timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := l.acquire(ctx, "v", "n1", time.Minute)
		if err == nil {
			r()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a left caller's slot never came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
