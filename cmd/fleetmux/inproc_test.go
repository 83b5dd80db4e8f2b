package main

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// inproc is a fleetmux command a test runs in-process (run), as a separate
// process would run it: it ends with stop, or when the test ends.
type inproc struct {
	args      []string
	out, errb testutil.Buffer
	done      chan struct{} // closed when run returned, with err
	err       error
	stop      func() error // cancels the command and waits for it (at most 20 s); idempotent
}

// startInproc runs fleetmux args until stop or the end of the test.
func startInproc(t *testing.T, args ...string) *inproc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &inproc{args: args, done: make(chan struct{})}
	go func() { p.err = run(ctx, args, &p.out, &p.errb); close(p.done) }()
	p.stop = sync.OnceValue(func() error {
		cancel()
		select {
		case <-p.done:
			return p.err
		case <-time.After(20 * time.Second):
			t.Errorf("%v did not stop", args[:min(3, len(args))])
			return nil
		}
	})
	t.Cleanup(func() { p.stop() })
	return p
}

// running fails the test when the command has stopped.
func (p *inproc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%v stopped: %v\n%s", p.args[:min(3, len(p.args))], p.err, p.errb.String())
	default:
	}
}

var httpAPIRE = regexp.MustCompile(`HTTP API: (http://\S+)`)

// httpAPI waits for a controller's (or dev's) HTTP API and returns its URL.
func (p *inproc) httpAPI(t *testing.T, within time.Duration) string {
	t.Helper()
	var base string
	testutil.Eventually(t, within, func() bool {
		p.running(t)
		if m := httpAPIRE.FindStringSubmatch(p.out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	}, "%v serving its HTTP API", p.args[:min(3, len(p.args))])
	return base
}
