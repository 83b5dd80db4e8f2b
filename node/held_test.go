package node_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
)

// startHolder runs a holder in this process and returns a client maker.
func startHolder(t *testing.T) func() *holder.Client {
	t.Helper()
	return startHolderIn(t, filepath.Join(t.TempDir(), "holder"))
}

// startHolderIn is startHolder with the holder's directory dir.
func startHolderIn(t *testing.T, dir string) func() *holder.Client {
	t.Helper()
	srv, err := holder.Listen(holder.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return func() *holder.Client {
		c, err := holder.Dial(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// overlapCollector is a NATS subscriber of one session's output that counts bytes
// it got twice (by offset).
type overlapCollector struct {
	collector
	repeated int64
	seen     map[int64]int64 // offset -> end of each chunk
}

func (c *overlapCollector) take(off int64, data []byte) {
	c.mu.Lock()
	for o, end := range c.seen {
		lo, hi := max(o, off), min(end, off+int64(len(data)))
		if hi > lo {
			c.repeated += hi - lo
		}
	}
	if c.seen == nil {
		c.seen = map[int64]int64{}
	}
	c.seen[off] = off + int64(len(data))
	c.mu.Unlock()
	c.add(off, data)
}

// subscribeOverlap subscribes col to session id's output; it ends with the test.
func (f *fixture) subscribeOverlap(id string) *overlapCollector {
	f.t.Helper()
	col := &overlapCollector{}
	stop, err := f.client.Subscribe(f.subj.Out("n1", id), func(_ string, h map[string]string, data []byte) {
		off, _ := strconv.ParseInt(h[api.HeaderOffset], 10, 64)
		col.take(off, data)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = stop() })
	return col
}

// restart closes the fixture's node (its sessions stay in the holder) and starts
// the next agent on the same data dir with the holder, scrollback and mods; it
// waits until the new agent lists want sessions.
func (f *fixture) restart(holderClient *holder.Client, scrollback, want int, mods ...func(*node.Config)) {
	f.t.Helper()
	if err := f.node.Close(); err != nil {
		f.t.Fatal(err)
	}
	bus, err := transport.Connect(context.Background(), transport.NATSConfig{URL: f.srv.ClientURL(), Name: "node2"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { bus.Close() })
	cfg := node.Config{Name: "n1", DataDir: f.data, Bus: bus, Verifier: f.trust.Verifier, Holder: holderClient, ScrollbackBytes: scrollback}
	for _, m := range mods {
		m(&cfg)
	}
	n2, err := node.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { n2.Close() })
	if err := n2.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.node = n2
	testutil.Eventually(f.t, 10*time.Second, func() bool {
		var l api.SessionList
		return f.call("list", nil, &l) == nil && len(l.Sessions) == want
	}, "the new agent lists %d sessions", want)
}

// subscribed waits until col holds session id's output from the first chunk it
// got up to end, then returns [0, end) with the gaps read back (as a subscriber
// fills them), the number of gaps after its first chunk, and the bytes it got twice.
func (f *fixture) subscribed(col *overlapCollector, id string, end int64) (text string, gaps int, repeated int64) {
	f.t.Helper()
	// The first prompt may be published before the subscription: from the first
	// chunk it got on, the subscriber must have everything.
	first := func() int64 {
		col.mu.Lock()
		defer col.mu.Unlock()
		m := end
		for o := range col.seen {
			m = min(m, o)
		}
		return m
	}
	deadline := time.Now().Add(10 * time.Second)
	for col.received() < end-first() {
		if time.Now().After(deadline) {
			want := end - first()
			col.mu.Lock()
			f.t.Fatalf("the subscriber got %d of %d bytes: chunks %v", col.bytes, want, col.seen)
		}
		time.Sleep(2 * time.Millisecond) // polling the subscriber's count, with a deadline
	}
	all, gaps := f.assemble(&col.collector, id, end)
	if first() > 0 {
		gaps-- // before the subscription
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	return string(all), gaps, col.repeated
}

// TestHolderRestart: with a holder, an agent's graceful stop leaves the sessions
// running; the next agent on the same data dir serves them with the same ids, a
// command that ran across the restart ends with its real exit code, block numbers
// go on, the session keeps its owner, and a NATS subscriber gets every output
// byte exactly once.
func TestHolderRestart(t *testing.T) {
	client := startHolder(t)
	f := newFixture(t, func(c *node.Config) { c.Holder = client() })
	s := f.create(api.CreateRequest{})
	col := f.subscribeOverlap(s.ID)
	f.run(s.ID, "echo before-restart")
	var r api.BlockResult
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "sleep 1; echo across; (exit 7)", TimeoutMS: 50}, &r)
	if r.Block.State != "running" {
		t.Fatalf("long command: %+v", r.Block)
	}
	long := r.Block.N
	f.restart(client(), 0, 1)
	var w api.BlockResult
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, &w)
	var b api.BlockResult
	f.mustCall("block", api.BlockRequest{Session: s.ID, N: long}, &b)
	if b.Block.State != "done" || b.Block.ExitCode == nil || *b.Block.ExitCode != 7 || b.Block.Command != "sleep 1; echo across; (exit 7)" {
		t.Fatalf("long block after the restart: %+v %q", b.Block, b.Text)
	}
	next := f.run(s.ID, "echo after-restart")
	if next.Block.N != long+1 {
		t.Fatalf("next block %d, want %d", next.Block.N, long+1)
	}
	var info api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &info)
	if s.Owner != "test:tester" || info.Owner != s.Owner {
		t.Fatalf("owner %q before the restart, %q after, want test:tester", s.Owner, info.Owner)
	}
	text, gaps, repeated := f.subscribed(col, s.ID, info.OutputOffset)
	if repeated != 0 || gaps != 0 || strings.Count(text, "\rbefore-restart\r\n") != 1 || strings.Count(text, "\racross\r\n") != 1 || strings.Count(text, "\rafter-restart\r\n") != 1 {
		t.Fatalf("subscriber: %d bytes repeated, %d gaps:\n%q", repeated, gaps, text)
	}
	// A new session gets a new id.
	if s2 := f.create(api.CreateRequest{}); s2.ID == s.ID {
		t.Fatalf("id %s reused", s2.ID)
	}
}

// TestHolderRestartWrapped: TestHolderRestart for a session whose output outgrew
// the holder's ring (a 256 KiB scrollback, 1 MB of output) before the restart:
// the new agent begins its replay at a checkpoint, so offsets, block numbers and
// exit codes go on exactly, the old output is read from the recording, and a NATS
// subscriber gets every byte exactly once.
func TestHolderRestartWrapped(t *testing.T) {
	const ring = 256 << 10 // a smaller one and the recorder lags out of it in the flood
	client := startHolder(t)
	f := newFixture(t, func(c *node.Config) { c.Holder = client(); c.ScrollbackBytes = ring })
	s := f.create(api.CreateRequest{})
	col := f.subscribeOverlap(s.ID)
	f.run(s.ID, "seq -f 'big-%g' 1 100000")
	if r := f.run(s.ID, "echo before-restart; (exit 3)"); r.Block.ExitCode == nil || *r.Block.ExitCode != 3 {
		t.Fatalf("second block: %+v", r.Block)
	}
	var r api.BlockResult
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "seq -f 'long-%g' 1 3000; sleep 1; echo across; (exit 7)", TimeoutMS: 300}, &r)
	if r.Block.State != "running" {
		t.Fatalf("long command: %+v", r.Block)
	}
	long := r.Block.N
	var before api.BlockList
	f.mustCall("blocks", api.SessionRequest{Session: s.ID}, &before)
	f.restart(client(), ring, 1)
	var w api.WaitReply
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, &w)
	if !w.OK {
		t.Fatalf("not idle after the restart: %+v", w.Session)
	}
	var b api.BlockResult
	f.mustCall("block", api.BlockRequest{Session: s.ID, N: long}, &b)
	if b.Block.State != "done" || b.Block.ExitCode == nil || *b.Block.ExitCode != 7 || !strings.HasPrefix(b.Block.Command, "seq -f 'long-%g'") {
		t.Fatalf("long block after the restart: %+v", b.Block)
	}
	var after api.BlockList
	f.mustCall("blocks", api.SessionRequest{Session: s.ID}, &after)
	for i, want := range before.Blocks[:len(before.Blocks)-1] {
		got := after.Blocks[i]
		if got.N != want.N || got.Command != want.Command || got.Start != want.Start || got.End != want.End ||
			(got.ExitCode == nil) != (want.ExitCode == nil) || got.ExitCode != nil && *got.ExitCode != *want.ExitCode {
			t.Fatalf("block %d after the restart:\n%+v\nbefore:\n%+v", want.N, got, want)
		}
	}
	next := f.run(s.ID, "echo after-restart")
	if next.Block.N != long+1 {
		t.Fatalf("next block %d, want %d", next.Block.N, long+1)
	}
	var info api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &info)
	text, _, repeated := f.subscribed(col, s.ID, info.OutputOffset) // gaps are read back: from the recording
	if repeated != 0 {
		t.Fatalf("the subscriber got %d bytes twice", repeated)
	}
	for _, line := range []string{"big-1\r\n", "big-100000\r\n", "\rbefore-restart\r\n", "long-3000\r\nacross\r\n", "\rafter-restart\r\n"} {
		if n := strings.Count(text, line); n != 1 {
			i := strings.Index(text, "long-3000")
			t.Fatalf("%q is %d times in the output; after long-3000: %q", line, n, text[max(i, 0):min(len(text), max(i, 0)+300)])
		}
	}
}

// markBus is a bus that looks, at each publication of a session's output, at how
// far the session's published mark (DIR/sessions/ID/published) says it got.
type markBus struct {
	node.Bus
	dir string

	mu     sync.Mutex
	chunks int
	behind []string // publications the mark did not cover yet
}

func (b *markBus) Publish(subject string, header map[string]string, data []byte) error {
	if id, ok := strings.CutPrefix(subject, "fleetmux.out.n1."); ok {
		off, _ := strconv.ParseInt(header[api.HeaderOffset], 10, 64)
		mark, _ := os.ReadFile(filepath.Join(b.dir, "sessions", id, "published"))
		v, err := strconv.ParseInt(strings.TrimSpace(string(mark)), 10, 64)
		b.mu.Lock()
		b.chunks++
		if end := off + int64(len(data)); err != nil || v < end {
			b.behind = append(b.behind, fmt.Sprintf("[%d,%d) with the mark at %q", off, end, mark))
		}
		b.mu.Unlock()
	}
	return b.Bus.Publish(subject, header, data)
}

// TestHolderPublishedMarkFirst: a session in a holder notes how far its output was
// published before the bytes leave (the mark the next agent publishes from). Noted
// after, an agent killed between the two left a mark behind what the bus had sent,
// and the next agent published those bytes a second time.
func TestHolderPublishedMarkFirst(t *testing.T) {
	client := startHolder(t)
	var bus *markBus
	f := newFixture(t, func(c *node.Config) {
		c.Holder = client()
		bus = &markBus{Bus: c.Bus, dir: c.DataDir}
		c.Bus = bus
	})
	s := f.create(api.CreateRequest{})
	for i := range 5 {
		f.run(s.ID, fmt.Sprintf("seq -f 'line-%d-%%g' 1 300", i))
	}
	bus.mu.Lock()
	defer bus.mu.Unlock()
	if bus.chunks < 5 || len(bus.behind) > 0 {
		t.Fatalf("%d publications of output, %d before the mark covered them: %v", bus.chunks, len(bus.behind), bus.behind)
	}
}

// TestHolderRestartBehindPublished: a reattached session whose output is still
// short of where the previous agent's publisher got to (its replay had not caught
// up when Reattach stopped waiting; here the mark is moved on by hand) publishes
// nothing below that mark: those bytes were published. Its viewer used to start at
// the output's end, and published them again.
func TestHolderRestartBehindPublished(t *testing.T) {
	client := startHolder(t)
	f := newFixture(t, func(c *node.Config) { c.Holder = client() })
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "echo before-restart")
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	markFile := filepath.Join(f.data, "sessions", s.ID, "published")
	b, err := os.ReadFile(markFile)
	if err != nil {
		t.Fatal(err)
	}
	mark, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	old := mark
	mark += 40 // published by the previous agent, not replayed by the next one yet
	if err := os.WriteFile(markFile, []byte(fmt.Sprintf("%020d\n", mark)), 0o600); err != nil {
		t.Fatal(err)
	}
	col := f.subscribeOverlap(s.ID)
	f.restart(client(), 0, 1) // the node is closed already (Close is idempotent)
	f.run(s.ID, "echo after-restart-with-more-than-forty-bytes-of-output")
	var info api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &info)
	testutil.Eventually(t, 10*time.Second, func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		for o, end := range col.seen {
			if o <= info.OutputOffset-1 && end >= info.OutputOffset {
				return true
			}
		}
		return false
	}, "the subscriber gets the output's end")
	col.mu.Lock()
	defer col.mu.Unlock()
	for o, end := range col.seen { // the previous agent's own may come late: up to old
		if o < mark && end > old {
			t.Fatalf("published [%d, %d), below the previous agent's mark %d: chunks %v", o, end, mark, col.seen)
		}
	}
}
