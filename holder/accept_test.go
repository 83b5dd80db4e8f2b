package holder

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a log sink tests read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAcceptOutOfFiles: a holder whose accept fails for want of descriptors keeps
// serving (Serve used to return, and `fleetmux holder` then closes every session):
// it waits and accepts the connection once descriptors are free again.
func TestAcceptOutOfFiles(t *testing.T) {
	var logs lockedBuffer
	dir := filepath.Join(t.TempDir(), "holder")
	srv, err := Listen(Config{Dir: dir, Version: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil)), IdleExit: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		srv.Close()
	}()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Room for the client's socket, none for the accepted one. Counting the
	// open descriptors is not enough (another goroutine of the test binary may
	// close one meanwhile): the limit is set a little above the count, the room
	// left is filled with /dev/null, and one of those is closed for the client.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(fds) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
	defer func() {
		for _, f := range fillers {
			f.Close()
		}
	}()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		fillers = append(fillers, f)
	}
	if len(fillers) == 0 {
		t.Fatal("no descriptor was free under the lowered limit")
	}
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	dialed := make(chan error, 1)
	go func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		c, err := Dial(dctx, dir)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "accept failed; retrying") {
		select {
		case err := <-dialed:
			restore()
			t.Fatalf("the dial ended before any accept failed (%v): the descriptors were not short", err)
		default:
		}
		if time.Now().After(deadline) {
			restore()
			t.Fatalf("no accept failed for want of descriptors; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the server's log, with a deadline
	}
	restore()
	if err := <-dialed; err != nil {
		t.Fatalf("the holder did not accept once descriptors were free: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}
