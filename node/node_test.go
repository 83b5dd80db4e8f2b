package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/replay"
	"github.com/fleetmux/fleetmux/transport"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// fixture is a node on a real embedded NATS server, and a client connection.
type fixture struct {
	t      *testing.T
	srv    *transport.Server
	node   *node.Node
	client *transport.Conn
	data   string
	subj   api.Subjects
	trust  *testutil.Trust
	role   string // the role requests are signed with (default admin)
	actor  string // who signs them: principal test:ACTOR (default tester)
}

// busBuffer is the node's reconnect buffer; the outage test shrinks it so the outage
// loses messages and the subscriber must fill gaps from the node (scrollback and
// recording).
var busBuffer = 0

func newFixture(t *testing.T, mod ...func(*node.Config)) *fixture {
	t.Helper()
	testutil.NeedTool(t, "bash")
	f := &fixture{t: t, data: t.TempDir(), subj: api.Subjects{}, trust: testutil.NewTrust(t), role: api.RoleAdmin}
	f.srv = testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	bus, err := transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: "node", ReconnectBufSize: busBuffer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	home := t.TempDir()
	t.Setenv("HOME", home) // the sessions' shells must not read the tester's rc files
	cfg := node.Config{Name: "n1", DataDir: f.data, Bus: bus, Verifier: f.trust.Verifier, Labels: map[string]string{"role": "test"}}
	for _, m := range mod {
		m(&cfg)
	}
	f.node, err = node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.node.Close() })
	f.client, err = transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.client.Close() })
	// The service is registered on the server once it answers.
	testutil.Eventually(t, 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := f.client.Request(ctx, f.subj.RPC("n1", "list"), f.sign("list", nil), nil)
		return err == nil
	}, "the node service to answer")
	return f
}

// sign is the header of a request of data to verb on n1, signed by the test
// controller for actor "tester" with f.role.
func (f *fixture) sign(verb string, data []byte) map[string]string {
	actor := f.actor
	if actor == "" {
		actor = "tester"
	}
	return f.trust.Header(f.t, f.subj.RPC("n1", verb), data, actor, f.role)
}

// call makes a request and decodes the reply into out; an error reply is returned as
// *api.Error.
func (f *fixture) call(verb string, req, out any) error {
	f.t.Helper()
	var data []byte
	switch r := req.(type) {
	case []byte:
		data = r
	default:
		data, _ = json.Marshal(req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := f.client.Request(ctx, f.subj.RPC("n1", verb), f.sign(verb, data), data)
	if aerr := (*api.Error)(nil); errors.As(err, &aerr) {
		return aerr
	}
	if err != nil {
		f.t.Fatalf("%s: request: %v", verb, err)
	}
	if out != nil {
		if err := json.Unmarshal(reply, out); err != nil {
			f.t.Fatalf("%s: reply %q: %v", verb, reply, err)
		}
	}
	return nil
}

func (f *fixture) mustCall(verb string, req, out any) {
	f.t.Helper()
	if err := f.call(verb, req, out); err != nil {
		f.t.Fatalf("%s: %v", verb, err)
	}
}

func (f *fixture) create(req api.CreateRequest) api.Session {
	f.t.Helper()
	var s api.Session
	f.mustCall("create", req, &s)
	return s
}

func (f *fixture) run(id, cmd string) api.BlockResult {
	f.t.Helper()
	var r api.BlockResult
	f.mustCall("run", api.RunRequest{Session: id, Command: cmd, TimeoutMS: 20000}, &r)
	if r.Block.State != "done" {
		f.t.Fatalf("run %q: block %s", cmd, r.Block.State)
	}
	return r
}

func code(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "no error"
}

func TestVerbs(t *testing.T) {
	f := newFixture(t)
	s := f.create(api.CreateRequest{Title: "build", Description: "runs things", Labels: map[string]string{"k": "v"}, Cols: 90, Rows: 20})
	if s.Node != "n1" || s.ID != "s1" || s.Title != "build" || s.Cols != 90 || s.Shell != "bash" {
		t.Fatalf("create: %+v", s)
	}
	r := f.run(s.ID, "echo hi; (exit 3)")
	if r.Text != "hi" || r.Block.ExitCode == nil || *r.Block.ExitCode != 3 || r.Session.ID != "s1" {
		t.Fatalf("run: %+v", r)
	}
	var got api.Session
	f.mustCall("get", api.SessionRequest{Session: "s1"}, &got)
	if got.LastExitCode == nil || *got.LastExitCode != 3 || got.State != "idle" {
		t.Fatalf("get: %+v", got)
	}
	title := "renamed"
	f.mustCall("update", api.UpdateRequest{Session: "s1", Title: &title}, &got)
	if got.Title != "renamed" || got.Description != "runs things" {
		t.Fatalf("update: %+v", got)
	}
	var list api.SessionList
	f.mustCall("list", nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Title != "renamed" {
		t.Fatalf("list: %+v", list)
	}

	// input, keys and wait: a read answered by typed input.
	var rr api.BlockResult
	f.mustCall("run", api.RunRequest{Session: "s1", Command: "read x; echo got=$x", TimeoutMS: 50}, &rr)
	var w api.WaitReply
	f.mustCall("wait", api.WaitRequest{Session: "s1", Until: "waiting_input", TimeoutMS: 10000}, &w)
	if !w.OK || w.Session.State != "waiting_input" {
		t.Fatalf("wait waiting_input: %+v", w)
	}
	f.mustCall("input", api.InputRequest{Session: "s1", Data: "bob"}, nil)
	f.mustCall("keys", api.KeysRequest{Session: "s1", Keys: []string{"Enter"}}, nil)
	f.mustCall("wait", api.WaitRequest{Session: "s1", Until: "idle", TimeoutMS: 10000}, &w)
	var br api.BlockResult
	f.mustCall("block", api.BlockRequest{Session: "s1", N: rr.Block.N}, &br)
	if br.Text != "bob\ngot=bob" {
		t.Fatalf("block after input: %q", br.Text)
	}
	f.mustCall("block", api.BlockRequest{Session: "s1", N: rr.Block.N, Grep: "got"}, &br)
	if br.Text != "2: got=bob" {
		t.Fatalf("block grep: %q", br.Text)
	}
	var bl api.BlockList
	f.mustCall("blocks", api.SessionRequest{Session: "s1"}, &bl)
	if len(bl.Blocks) != 2 || bl.Blocks[0].Command != "echo hi; (exit 3)" {
		t.Fatalf("blocks: %+v", bl)
	}
	// wait with a timeout that passes: ok=false, not an error.
	f.mustCall("wait", api.WaitRequest{Session: "s1", Until: "exited", TimeoutMS: 50}, &w)
	if w.OK {
		t.Fatal("wait exited returned ok for a live session")
	}

	f.mustCall("resize", api.ResizeRequest{Session: "s1", Cols: 100, Rows: 30}, &got)
	r = f.run("s1", "stty size")
	if r.Text != "30 100" {
		t.Fatalf("stty size after resize: %q", r.Text)
	}
	var scr api.Screen
	f.mustCall("screen", api.SessionRequest{Session: "s1"}, &scr)
	if scr.Cols != 100 || !strings.Contains(scr.Text, "30 100") {
		t.Fatalf("screen: %+v", scr)
	}
	var rd api.ReadReply
	f.mustCall("read", api.ReadRequest{Session: "s1", From: r.Block.Start, Max: int(r.Block.End - r.Block.Start)}, &rd)
	if string(rd.Data) != "30 100\r\n" || rd.Offset != r.Block.Start || rd.End < r.Block.End {
		t.Fatalf("read: %+v", rd)
	}

	f.mustCall("close", api.SessionRequest{Session: "s1"}, &got)
	if err := f.call("get", api.SessionRequest{Session: "s1"}, nil); code(err) != api.CodeNotFound {
		t.Fatalf("get after close: %v", err)
	}
	// ids are never reused
	if s2 := f.create(api.CreateRequest{}); s2.ID != "s2" {
		t.Fatalf("second session id %s", s2.ID)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, func(c *node.Config) { c.MaxSessions = 2 })
	f.create(api.CreateRequest{})
	cases := []struct {
		verb string
		req  any
		code string
	}{
		{"get", api.SessionRequest{Session: "s9"}, api.CodeNotFound},
		{"get", api.SessionRequest{Session: "a.b"}, api.CodeBadRequest},
		{"get", api.SessionRequest{Session: ""}, api.CodeBadRequest},
		{"run", []byte(`{"session": "s1", "command": `), api.CodeBadRequest},
		{"run", []byte(`[1,2]`), api.CodeBadRequest},
		{"run", api.RunRequest{Session: "s1", Command: "  "}, api.CodeBadRequest},
		{"run", api.RunRequest{Session: "s1", Command: strings.Repeat("x", 300<<10)}, api.CodeTooLarge},
		{"run", api.RunRequest{Session: "s1", Command: "true", TimeoutMS: -1}, api.CodeBadRequest},
		{"input", api.InputRequest{Session: "s1", Data: strings.Repeat("x", api.MaxInputBytes+1)}, api.CodeTooLarge},
		{"keys", api.KeysRequest{Session: "s1", Keys: []string{"C-c", "Hyper-x"}}, api.CodeBadRequest},
		{"keys", api.KeysRequest{Session: "s1"}, api.CodeBadRequest},
		{"resize", api.ResizeRequest{Session: "s1", Cols: 0, Rows: 5}, api.CodeBadRequest},
		{"block", api.BlockRequest{Session: "s1", N: 42}, api.CodeNotFound},
		{"block", api.BlockRequest{Session: "s1", N: 1, Grep: "("}, api.CodeBadRequest},
		{"read", api.ReadRequest{Session: "s1", From: -5}, api.CodeBadRequest},
		{"wait", api.WaitRequest{Session: "s1", Until: "soon"}, api.CodeBadRequest},
		{"create", api.CreateRequest{Shell: "fish"}, api.CodeBadRequest},
		{"create", api.CreateRequest{Cwd: "/nonexistent"}, api.CodeBadRequest},
		{"create", api.CreateRequest{Labels: map[string]string{"bad key": "v"}}, api.CodeBadRequest},
		{"create", api.CreateRequest{Title: strings.Repeat("t", 300)}, api.CodeTooLarge},
		{"update", api.UpdateRequest{Session: "s1", Labels: map[string]string{"a.b": "v"}}, api.CodeBadRequest},
		{"close", api.SessionRequest{Session: "s7"}, api.CodeNotFound},
	}
	for _, c := range cases {
		if err := f.call(c.verb, c.req, nil); code(err) != c.code {
			t.Errorf("%s %s: got %v, want code %s", c.verb, truncate(c.req), err, c.code)
		}
	}
	// Nothing changed: still one session, no blocks, and the session works.
	var list api.SessionList
	f.mustCall("list", nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Blocks != 0 || list.Sessions[0].Title != "" {
		t.Fatalf("bad requests changed something: %+v", list.Sessions)
	}
	// busy: a run while a command runs.
	var rr api.BlockResult
	f.mustCall("run", api.RunRequest{Session: "s1", Command: "sleep 30", TimeoutMS: 50}, &rr)
	if err := f.call("run", api.RunRequest{Session: "s1", Command: "echo no"}, nil); code(err) != api.CodeBusy {
		t.Fatalf("run while running: %v", err)
	}
	// the session limit
	f.create(api.CreateRequest{})
	if err := f.call("create", api.CreateRequest{}, nil); code(err) != api.CodeLimit {
		t.Fatalf("create over the limit: %v", err)
	}
}

func truncate(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

func TestIdempotentRun(t *testing.T) {
	f := newFixture(t)
	f.create(api.CreateRequest{})
	req := api.RunRequest{Session: "s1", Command: "echo run-$RANDOM >> $HOME/ran; cat $HOME/ran | wc -l", TimeoutMS: 10000, IdempotencyKey: "k1"}
	var a, b api.BlockResult
	f.mustCall("run", req, &a)
	f.mustCall("run", req, &b)
	if a.Block.N != b.Block.N || a.Text != "1" || b.Text != "1" {
		t.Fatalf("retry with the same key: blocks %d/%d, texts %q/%q", a.Block.N, b.Block.N, a.Text, b.Text)
	}
	req.IdempotencyKey = "k2"
	f.mustCall("run", req, &b)
	if b.Block.N == a.Block.N || b.Text != "2" {
		t.Fatalf("a new key must run again: %+v", b)
	}
}

// TestIdempotentRetryInProgress: retries that arrive while the first run is still
// running (a client that timed out, a controller that restarted) wait for the
// same block instead of running the command again or failing busy.
func TestIdempotentRetryInProgress(t *testing.T) {
	f := newFixture(t)
	f.create(api.CreateRequest{})
	req := api.RunRequest{Session: "s1", Command: "sleep 0.5; echo once >> $HOME/once; wc -l < $HOME/once", TimeoutMS: 10000, IdempotencyKey: "slow"}
	// The first attempt gives up early: the block is still running.
	short := req
	short.TimeoutMS = 50
	var first api.BlockResult
	f.mustCall("run", short, &first)
	if first.Block.State != "running" {
		t.Fatalf("first attempt: %+v", first.Block)
	}
	var wg sync.WaitGroup
	results := make([]api.BlockResult, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.mustCall("run", req, &results[i])
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Block.N != first.Block.N || r.Block.State != "done" || r.Text != "1" {
			t.Fatalf("retry %d: %+v %q", i, r.Block, r.Text)
		}
	}
}

// collector keeps the output chunks a subscriber received, by offset.
type collector struct {
	mu     sync.Mutex
	chunks map[int64][]byte
	bytes  int64
}

func (c *collector) add(off int64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chunks == nil {
		c.chunks = map[int64][]byte{}
	}
	c.chunks[off] = append([]byte(nil), data...)
	c.bytes += int64(len(data))
}

func (c *collector) received() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// assemble rebuilds [0, end) from the chunks, filling every gap with the read verb as
// a subscriber would. It returns the bytes and the number of gaps filled.
func (f *fixture) assemble(c *collector, id string, end int64) ([]byte, int) {
	c.mu.Lock()
	offs := make([]int64, 0, len(c.chunks))
	for off := range c.chunks {
		offs = append(offs, off)
	}
	c.mu.Unlock()
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	out := make([]byte, 0, end)
	gaps := 0
	for pos := int64(0); pos < end; {
		i := sort.Search(len(offs), func(i int) bool { return offs[i] > pos }) - 1
		if i >= 0 {
			c.mu.Lock()
			d := c.chunks[offs[i]]
			c.mu.Unlock()
			if offs[i]+int64(len(d)) > pos {
				d = d[pos-offs[i]:]
				d = d[:min(int64(len(d)), end-pos)]
				out = append(out, d...)
				pos += int64(len(d))
				continue
			}
		}
		next := end
		if i+1 < len(offs) {
			next = min(next, offs[i+1])
		}
		gaps++
		for pos < next {
			var rd api.ReadReply
			f.mustCall("read", api.ReadRequest{Session: id, From: pos, Max: int(min(next-pos, api.MaxReadBytes))}, &rd)
			if len(rd.Data) == 0 || rd.Offset != pos {
				f.t.Fatalf("read at %d returned %d bytes at %d (end %d)", pos, len(rd.Data), rd.Offset, rd.End)
			}
			out = append(out, rd.Data...)
			pos += int64(len(rd.Data))
		}
	}
	return out, gaps
}

// streamTest writes total bytes in a session while a subscriber reconstructs them; mid
// is called once the subscriber has seen some output (e.g. to stop NATS).
func streamTest(t *testing.T, total int, mid func(f *fixture)) {
	// The recorder must keep up within the scrollback; under the race detector it is
	// several times slower than in production, so give it room.
	f := newFixture(t, func(c *node.Config) { c.ScrollbackBytes = 64 << 20 })
	s := f.create(api.CreateRequest{})
	sub, err := nats.Connect(f.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var col collector
	var ns *nats.Subscription
	ns, err = sub.Subscribe(f.subj.All(api.KindOut, "n1"), func(m *nats.Msg) {
		off, err := strconv.ParseInt(m.Header.Get(api.HeaderOffset), 10, 64)
		if err != nil || m.Header.Get(api.HeaderTime) == "" {
			t.Errorf("message without offset or time headers: %v", m.Header)
			return
		}
		col.add(off, m.Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A test subscriber must not drop messages as a slow consumer.
	if err := ns.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	cmd := "head -c " + strconv.Itoa(total) + " /dev/zero | tr '\\0' x; echo; echo done-marker"
	var rr api.BlockResult
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: cmd, TimeoutMS: 50}, &rr)
	if mid != nil {
		testutil.Eventually(t, 30*time.Second, func() bool { return col.received() > 2<<20 }, "the subscriber to see 2 MB")
		mid(f)
	}
	var w api.WaitReply
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 120000}, &w)
	if !w.OK {
		t.Fatalf("the command did not finish: %+v", w.Session)
	}
	end := w.Session.OutputOffset
	// Let what is in flight arrive: wait until the stream reached the end or stopped
	// growing (a loaded machine can make the server drop a slow subscriber's messages;
	// that is a gap like any other, filled with read).
	last, lastAt := col.received(), time.Now()
	testutil.Eventually(t, 60*time.Second, func() bool {
		if n := col.received(); n != last {
			last, lastAt = n, time.Now()
		}
		return last >= end || time.Since(lastAt) > 2*time.Second
	}, "the stream to deliver or settle")
	got, gaps := f.assemble(&col, s.ID, end)
	if mid == nil && gaps != 0 {
		t.Logf("%d gaps without an outage (slow subscriber under load); filled with read", gaps)
	}
	if mid != nil && gaps == 0 {
		t.Fatalf("the outage lost nothing: the gap-filling path was not exercised")
	}

	// The session's own record: its recording.
	rec, err := replay.Open(filepath.Join(f.data, "sessions", s.ID, "output.cast"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	testutil.Eventually(t, 10*time.Second, func() bool {
		r2, err := replay.Open(filepath.Join(f.data, "sessions", s.ID, "output.cast"))
		if err != nil {
			return false
		}
		defer r2.Close()
		return r2.End() >= end
	}, "the recording to hold all output")
	rec.Close()
	rec, _ = replay.Open(filepath.Join(f.data, "sessions", s.ID, "output.cast"))
	want, err := rec.ReadRange(0, end)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("reconstructed stream differs from the recording at byte %d of %d (gaps filled: %d)", i, end, gaps)
	}
	if !bytes.Contains(got[max(0, len(got)-200):], []byte("done-marker")) || len(got) < total {
		t.Fatalf("stream of %d bytes lacks the output", len(got))
	}
	t.Logf("%d bytes byte-exact; %d gaps filled with read", end, gaps)
}

func TestOutputStreamByteExact(t *testing.T) {
	streamTest(t, 50_000_000, nil)
}

func TestOutputStreamSurvivesNATSOutage(t *testing.T) {
	busBuffer = 1 << 20
	defer func() { busBuffer = 0 }()
	streamTest(t, 50_000_000, func(f *fixture) {
		before := f.node.Sessions()[0].OutputOffset
		testutil.StopNATS(t, f.srv)
		// The session keeps running and producing output while NATS is down.
		testutil.Eventually(t, 60*time.Second, func() bool {
			return f.node.Sessions()[0].OutputOffset > before+10<<20
		}, "output to continue while NATS is down")
		f.srv = testutil.StartNATSAgain(t, f.srv)
		// Both connections reconnect on their own; the node's service is back once it
		// answers again.
		testutil.Eventually(t, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := f.client.Request(ctx, f.subj.RPC("n1", "list"), f.sign("list", nil), nil)
			return err == nil
		}, "the node to answer after NATS came back")
	})
}

func TestBlockEventsInOrder(t *testing.T) {
	f := newFixture(t)
	sub, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	events := map[string][]api.BlockEvent{}
	if _, err := sub.Subscribe(f.subj.All(api.KindBlock, "*"), func(m *nats.Msg) {
		var e api.BlockEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Errorf("block event: %v", err)
			return
		}
		mu.Lock()
		events[e.Session] = append(events[e.Session], e)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	sub.Flush()
	second := "zsh" // the second session runs zsh when it is installed
	if testutil.WantTool(t, "zsh") == "" {
		second = "bash"
	}
	a, b := f.create(api.CreateRequest{}), f.create(api.CreateRequest{Shell: second})
	var wg sync.WaitGroup
	for _, id := range []string{a.ID, b.ID} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 5; i++ {
				var r api.BlockResult
				if err := f.call("run", api.RunRequest{Session: id, Command: "echo " + id + "; (exit " + strconv.Itoa(i) + ")", TimeoutMS: 20000}, &r); err != nil {
					t.Errorf("run: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	testutil.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events[a.ID]) == 10 && len(events[b.ID]) == 10
	}, "10 block events per session")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{a.ID, b.ID} {
		evs := events[id]
		for i, e := range evs {
			n := i/2 + 1
			want := []string{"started", "finished"}[i%2]
			if e.Block.N != n || e.Type != want || e.Node != "n1" {
				t.Fatalf("%s event %d: %s block %d, want %s block %d", id, i, e.Type, e.Block.N, want, n)
			}
			if want == "finished" && (e.Block.ExitCode == nil || *e.Block.ExitCode != n) {
				t.Fatalf("%s block %d finished with exit %v, want %d", id, n, e.Block.ExitCode, n)
			}
			if i > 0 && e.Seq <= evs[i-1].Seq {
				t.Fatalf("%s: event seq not increasing", id)
			}
		}
	}
}

func TestAuditAndEvents(t *testing.T) {
	f := newFixture(t)
	sub, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	audits := make(chan api.AuditRecord, 64)
	sevents := make(chan api.SessionEvent, 256)
	sub.Subscribe(f.subj.Audit("n1"), func(m *nats.Msg) {
		var r api.AuditRecord
		json.Unmarshal(m.Data, &r)
		audits <- r
	})
	sub.Subscribe(f.subj.All(api.KindEvent, "n1"), func(m *nats.Msg) {
		var e api.SessionEvent
		json.Unmarshal(m.Data, &e)
		sevents <- e
	})
	sub.Flush()
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "echo audited")
	f.call("input", api.InputRequest{Session: s.ID, Data: "secret-password"}, nil)
	f.call("run", api.RunRequest{Session: "nope", Command: "x"}, nil)
	want := []struct{ action, result, detail string }{
		{"create", "ok", ""}, {"run", "ok", "echo audited"}, {"input", "ok", "input of 15 bytes"}, {"run", api.CodeNotFound, "x"},
	}
	for _, w := range want {
		select {
		case r := <-audits:
			if r.Action != w.action || r.Result != w.result || r.Detail != w.detail || r.Actor != "tester" || r.Node != "n1" ||
				r.Role != api.RoleAdmin || r.Controller != "ctl" || r.Claimed != "" {
				t.Fatalf("audit record %+v, want %+v", r, w)
			}
			if strings.Contains(r.Detail, "secret") {
				t.Fatal("input content in the audit log")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no audit record for %s", w.action)
		}
	}
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
	seen := map[string]bool{}
	testutil.Eventually(t, 10*time.Second, func() bool {
		for {
			select {
			case e := <-sevents:
				seen[e.Type] = true
			default:
				return seen["created"] && seen["state"] && seen["closed"]
			}
		}
	}, "created, state and closed session events")
}

func TestRecordingsSurviveRestart(t *testing.T) {
	f := newFixture(t)
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "printf 'héllo ✓\\n'")
	f.run(s.ID, "(exit 4)")
	var rd api.ReadReply
	f.mustCall("read", api.ReadRequest{Session: s.ID, From: 0}, &rd)
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	cast := filepath.Join(f.data, "sessions", s.ID, "output.cast")
	rec, err := replay.Open(cast)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	all, err := rec.ReadRange(0, rec.End())
	if err != nil || !bytes.Equal(all[:len(rd.Data)], rd.Data) {
		t.Fatalf("recording differs from the session's output (%v)", err)
	}
	idx, err := os.Open(filepath.Join(f.data, "sessions", s.ID, "output.blocks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := replay.ReadIndex(idx)
	idx.Close()
	if err != nil || len(entries) != 2 || entries[1].ExitCode == nil || *entries[1].ExitCode != 4 || entries[0].Command != "printf 'héllo ✓\\n'" {
		t.Fatalf("block index: %+v, %v", entries, err)
	}
	// asciicast v3: a marker per block at its start, matching the index (number,
	// command, output offset), and the block's exit code once served with the index.
	if h := rec.Header(); h.Version != 3 {
		t.Fatalf("recording version %d, want 3", h.Version)
	}
	var markers []replay.Event
	_ = rec.Events(t.Context(), replay.Position{}, func(e replay.Event) error {
		if e.Kind == "m" {
			markers = append(markers, e)
		}
		return nil
	})
	if len(markers) != len(entries) {
		t.Fatalf("%d markers, %d blocks in the index", len(markers), len(entries))
	}
	label := replay.IndexLabel(entries)
	for i, m := range markers {
		n, cmd, _, ok := replay.MarkerBlock(m.Data)
		e := entries[i]
		if !ok || n != e.N || cmd != e.Command || m.Offset > e.Start {
			t.Errorf("marker %q at offset %d; index: block %d %q from %d", m.Data, m.Offset, e.N, e.Command, e.Start)
		}
		if _, _, exit, _ := replay.MarkerBlock(label(m.Data)); exit == nil || *exit != *e.ExitCode {
			t.Errorf("served marker %q, want exit %d", label(m.Data), *e.ExitCode)
		}
	}
	if asc := testutil.WantTool(t, "asciinema"); asc != "" {
		out := testutil.RunAsciinema(t, asc, "cat", exportV2(t, cast))
		if !bytes.Equal(out, all) {
			t.Fatalf("asciinema cat output (%d bytes) differs from the recording (%d bytes)", len(out), len(all))
		}
	}
	// A new agent on the same data dir: old recordings stay, ids are not reused.
	n2, err := node.New(node.Config{Name: "n1", DataDir: f.data, Bus: nopBus{}, Verifier: f.trust.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, err := os.Stat(cast); err != nil {
		t.Fatal(err)
	}
}

type nopBus struct{}

func (nopBus) Publish(string, map[string]string, []byte) error { return nil }
func (nopBus) Serve(string, string, map[string]string, func(context.Context, string, string, map[string]string, []byte) ([]byte, *api.Error)) (func() error, error) {
	return func() error { return nil }, nil
}
func (nopBus) Connected() bool { return true }

var _ node.Bus = (*transport.Conn)(nil)
var _ node.Bus = nopBus{}
