package holder

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds or d passed; it returns whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	return true
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestIdleSessionsGoroutines: idle sessions, each with an attached stream that
// caught up, park one goroutine each in the holder (the PTY read); their exits
// still come (a status, and 128+N for a signal); the stream of an agent that died
// is closed at the next output and at the next attach; Close leaves no goroutine.
func TestIdleSessionsGoroutines(t *testing.T) {
	const n = 20
	// The process's signal goroutine starts with the first Notify and never ends:
	// start it before counting.
	warm := make(chan os.Signal, 1)
	signal.Notify(warm, syscall.SIGCHLD)
	signal.Stop(warm)
	base := runtime.NumGoroutine()

	srv, dir := startHolder(t)
	c := dialT(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idle := runtime.NumGoroutine()
	streams := make([]*Stream, n)
	masters := make([]*os.File, n)
	for i := range n {
		id := "s" + strconv.Itoa(i)
		_, masters[i] = spawnT(t, c, id, "/bin/sh", "-c", `echo ready; while read x; do echo "got $x"; done; exit 7`)
		st, err := c.Attach(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		defer st.Master.Close()
		streams[i] = st
		collect(t, st, "ready\r\n")
	}
	if !waitFor(10*time.Second, func() bool { return runtime.NumGoroutine()-idle <= n+2 }) {
		t.Fatalf("%d idle sessions park %d goroutines in the holder, want at most %d:\n%s", n, runtime.NumGoroutine()-idle, n+2, goroutineDump())
	}

	// The exit code comes: a status, and 128+9 for SIGKILL.
	if _, err := masters[0].Write([]byte("\x04")); err != nil { // EOF: the loop ends, exit 7
		t.Fatal(err)
	}
	if x := exitOf(t, streams[0]); x.Code == nil || *x.Code != 7 {
		t.Fatalf("exit code %v, want 7", x.Code)
	}
	if err := c.Signal(ctx, "s1", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if x := exitOf(t, streams[1]); x.Code == nil || *x.Code != 128+9 {
		t.Fatalf("exit code %v, want %d", x.Code, 128+9)
	}

	// The agent of s2 dies (its stream closes, nobody tells the holder): the next
	// output finds it gone and closes the holder's end.
	h2, err := srv.session("s2")
	if err != nil {
		t.Fatal(err)
	}
	dead := outOf(h2)
	streams[2].Close()
	if _, err := masters[2].Write([]byte("more\n")); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return outOf(h2) == nil && isClosed(dead.c) }) {
		t.Fatal("the stream of a dead agent is still open after the next output")
	}
	// The agent of s3 dies, s3 stays idle: the next attach closes its stream.
	h3, err := srv.session("s3")
	if err != nil {
		t.Fatal(err)
	}
	dead = outOf(h3)
	streams[3].Close()
	if isClosed(dead.c) {
		t.Fatal("closed before anything told the holder (the test proves nothing)")
	}
	again, err := c.Attach(ctx, "s3", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	defer again.Master.Close()
	collect(t, again, "ready\r\n")
	if !isClosed(dead.c) || outOf(h3) == dead {
		t.Fatal("the stream of a dead agent is still open after the next attach")
	}

	// Close ends every session and waits for every goroutine of the holder.
	srv.Close()
	if !waitFor(10*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		t.Fatalf("after Close: %d goroutines, %d before the holder:\n%s", runtime.NumGoroutine(), base, goroutineDump())
	}
}

// exitOf reads st up to the exit.
func exitOf(t *testing.T, st *Stream) Chunk {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, func() { st.Close() })
	defer timer.Stop()
	for {
		ch, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended before the exit: %v", err)
		}
		if ch.Exited {
			return ch
		}
	}
}

func outOf(h *held) *outStream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out
}

// isClosed reports whether the holder closed its end of c.
func isClosed(c *conn) bool {
	return c.c.SetDeadline(time.Time{}) != nil
}

// TestReattachWhileOutput: agents come and go (each new attach replaces the
// stream: a closed one, or a live one it names by epoch) while the program prints; the streams, read from where the last one
// stopped, carry every line exactly once and then the exit.
func TestReattachWhileOutput(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	spawnT(t, c, "s1", "/bin/sh", "-c", `i=0; while [ $i -lt 3000 ]; do echo "line-$i"; i=$((i+1)); done; exit 3`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var all []byte
	off := int64(0)
	epoch := uint64(0) // the live stream's, to end it; 0 once its agent died
	for round := 0; ; round++ {
		st, err := c.Attach(ctx, "s1", off, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if st.From != off {
			t.Fatalf("round %d: attach from %d, want %d", round, st.From, off)
		}
		st.Master.Close()
		// Read a few chunks (or to the exit), then go away without a word.
		for k := 0; k < 3 || round >= 6; k++ {
			ch, err := st.Next()
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if ch.Off != off {
				t.Fatalf("round %d: chunk at %d, want %d", round, ch.Off, off)
			}
			if ch.Exited {
				if ch.Code == nil || *ch.Code != 3 {
					t.Fatalf("exit code %v, want 3", ch.Code)
				}
				st.Close()
				for i := range 3000 {
					if n := strings.Count(string(all), "line-"+strconv.Itoa(i)+"\r\n"); n != 1 {
						t.Fatalf("line-%d seen %d times", i, n)
					}
				}
				return
			}
			all = append(all, ch.Data...)
			off += int64(len(ch.Data))
		}
		if round%2 == 0 {
			st.Close() // the agent died before the next attach
			epoch = 0
		} else {
			defer st.Close() // still open: the next attach, naming it, replaces it
			epoch = st.Epoch
		}
	}
}

// TestSettleReturnsMemory: a holder that went quiet after requests runs a GC that
// returns the freed memory to the OS (debug.FreeOSMemory: a forced GC cycle).
func TestSettleReturnsMemory(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := forced()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*settleAfter, func() bool { return forced() > before }) {
		t.Fatalf("no GC within %v of the holder going quiet", 10*settleAfter)
	}
}

// TestAttachRightAfterAttach: an agent that closes a stream as soon as its reply
// came and attaches again (Reattach does, to start from a checkpoint) keeps the
// second stream: the attaches win in the order they are made, not in the order
// their streams begin.
func TestAttachRightAfterAttach(t *testing.T) {
	// The first attach's goroutine is slow to start its stream: it waits until the
	// second attach is done (as a loaded holder may).
	var second *Stream
	secondDone := make(chan struct{}, 1)
	var calls atomic.Int32
	testAfterReply = func() {
		if calls.Add(1)%2 == 1 {
			select {
			case <-secondDone:
			case <-time.After(5 * time.Second):
			}
		}
	}
	t.Cleanup(func() { testAfterReply = nil }) // after the holder's Close: set before it starts
	_, dir := startHolder(t)
	c := dialT(t, dir)
	spawnT(t, c, "s1", "/bin/sh", "-c", `while :; do echo tick; sleep 0.01; done`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		first, err := c.Attach(ctx, "s1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		first.Close()
		first.Master.Close()
		second, err = c.Attach(ctx, "s1", 1<<40, 0) // from the end: the next tick
		if err != nil {
			t.Fatal(err)
		}
		secondDone <- struct{}{}
		second.Master.Close()
		timer := time.AfterFunc(10*time.Second, func() { second.Close() })
		ch, err := second.Next()
		timer.Stop()
		second.Close()
		if err != nil || ch.Exited || len(ch.Data) == 0 {
			t.Fatalf("attach %d: the second stream gave %+v, %v", i, ch, err)
		}
	}
}
