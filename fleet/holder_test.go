package fleet_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
)

// outCollector is a NATS subscriber's view of one node's output: chunks by session
// and offset, and the bytes it got twice.
type outCollector struct {
	mu       sync.Mutex
	chunks   map[string]map[int64][]byte
	repeated map[string]int64
	times    map[string]map[int64]string // Fleetmux-Time of each chunk, when kept (newCollector)
}

func (c *outCollector) take(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	off, err := strconv.ParseInt(m.Header.Get(api.HeaderOffset), 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chunks[id] == nil {
		c.chunks[id] = map[int64][]byte{}
	}
	for o, d := range c.chunks[id] {
		if lo, hi := max(o, off), min(o+int64(len(d)), off+int64(len(m.Data))); hi > lo {
			c.repeated[id] += hi - lo
		}
	}
	c.chunks[id][off] = append([]byte(nil), m.Data...)
	if c.times != nil {
		if c.times[id] == nil {
			c.times[id] = map[int64]string{}
		}
		c.times[id][off] = m.Header.Get(api.HeaderTime)
	}
}

// assemble is what the subscriber has of session id's output [0, len(full)), its
// gaps filled from full (the read verb's bytes, as a subscriber fills them).
func (c *outCollector) assemble(id string, full []byte) (out []byte, gaps int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	offs := make([]int64, 0, len(c.chunks[id]))
	for o := range c.chunks[id] {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	pos := int64(0)
	for _, o := range offs {
		d := c.chunks[id][o]
		if o > pos {
			gaps++
			out = append(out, full[pos:min(o, int64(len(full)))]...)
			pos = o
		}
		if end := o + int64(len(d)); end > pos {
			out = append(out, d[pos-o:]...)
			pos = end
		}
	}
	if pos < int64(len(full)) {
		gaps++
		out = append(out, full[pos:]...)
	}
	return out, gaps
}

// waitIdle waits until session node/id is idle for as long as its output grows: a
// wait of idleQuiet that sees no new output ends it (the session is stuck, or its
// output is lost on the way; at most rounds waits), a slow machine only makes it
// longer. A fixed deadline was a race with the load: on a machine busy with other
// tests (two fuzzers), the 400 lines took more than its 30 s, and the lines not
// printed yet were taken for lost.
func (c *apiClient) waitIdle(node, id string) api.WaitReply {
	c.f.t.Helper()
	const idleQuiet, rounds = 30 * time.Second, 10
	var w api.WaitReply
	for i, last := 0, int64(-1); ; i++ {
		c.call(http.MethodGet, fmt.Sprintf("/v1/sessions/%s/%s/wait?until=idle&timeout_ms=%d", node, id, idleQuiet.Milliseconds()), nil, http.StatusOK, &w)
		if w.OK || w.Session.OutputOffset == last || i == rounds-1 {
			return w
		}
		if last >= 0 {
			c.f.t.Logf("%s/%s: still %s after %v, its output grows (at %d): waiting on", node, id, w.Session.State, idleQuiet, w.Session.OutputOffset)
		}
		last = w.Session.OutputOffset
	}
}

// holderView is what the holder and the kernel say of session id, for a failure:
// the holder's raw output end (the agent's offsets leave the marks out) and the
// state of each process of the session (R running, S sleeping, T stopped) with
// what it waits in, which tells a slow session from a stuck one.
func holderView(data, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := holder.Dial(ctx, filepath.Join(data, "holder"))
	if err != nil {
		return "the holder: " + err.Error()
	}
	defer c.Close()
	list, err := c.List(ctx)
	if err != nil {
		return "the holder: " + err.Error()
	}
	for _, h := range list {
		if h.ID != id {
			continue
		}
		out := fmt.Sprintf("the holder: raw output [%d, %d), exited %v; processes:", h.Start, h.End, h.Exited)
		for pids := []string{strconv.Itoa(h.PID)}; len(pids) > 0; pids = pids[1:] {
			stat, _ := os.ReadFile("/proc/" + pids[0] + "/stat")
			wchan, _ := os.ReadFile("/proc/" + pids[0] + "/wchan")
			if f := strings.Fields(string(stat[min(len(stat), strings.LastIndexByte(string(stat), ')')+1):])); len(f) > 0 {
				out += fmt.Sprintf(" %s %s (%s)", pids[0], f[0], wchan)
			}
			kids, _ := os.ReadFile("/proc/" + pids[0] + "/task/" + pids[0] + "/children")
			pids = append(pids, strings.Fields(string(kids))...)
		}
		return out
	}
	return "the holder does not have " + id
}

// TestHolderSurvivesAgent is issue 18's first promise, with separate processes (the node and its holder in a network namespace of their own when root): a
// holder (run as a service of its own), a controller, a node agent with --holder,
// and a NATS subscriber. The agent is killed with SIGKILL while 10 sessions print
// lines and one of them runs a long command; a new agent reattaches: the same ids,
// the long command's block ends with its real exit code, a request in flight at the
// kill fails within a second with unavailable, and every line is in the output
// exactly once, over the API and for the subscriber. Then the same across a
// graceful restart into a newer agent binary (the upgrade path).
func TestHolderSurvivesAgent(t *testing.T) {
	root := t.TempDir()
	nw := setupNetwork(t, []string{"n1"}) // the node (and its holder) in a namespace of its own, as root
	f := newFleet(t, root, nw)
	gossipKeyFile := filepath.Join(root, "gossip.key")
	if err := os.WriteFile(gossipKeyFile, []byte(randomHex(32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.run("controller", "init", "--data", filepath.Join(root, "ctl"))
	if err := os.MkdirAll(filepath.Join(root, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	creds := func(kind, name string) string {
		file := filepath.Join(root, "creds", kind+"-"+name+".creds")
		f.run("enroll", kind, name, "--data", filepath.Join(root, "ctl"), "--out", file)
		if kind != "subscriber" {
			installKeys(t, strings.TrimSuffix(file, ".creds")+".keys", filepath.Join(root, name, "keys"))
		}
		return file
	}
	ports := freePorts(t, nw.hostIP, 2)
	natsAddr := net.JoinHostPort(nw.hostIP, strconv.Itoa(ports[0]))
	gossipA := net.JoinHostPort(nw.hostIP, strconv.Itoa(ports[1]))
	nodeGossip := net.JoinHostPort(nw.nodeIP["n1"], "7946")
	if !nw.netns {
		nodeGossip = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, "127.0.0.1", 1)[0]))
	}
	natsURL := "nats://" + natsAddr
	creds("controller", "ctl")
	ctl := f.start("ctl", "", "controller", "--name", "ctl", "--data", filepath.Join(root, "ctl"),
		"--nats-listen", natsAddr, "--http-listen", "127.0.0.1:0",
		"--gossip-listen", gossipA, "--gossip-key-file", gossipKeyFile)
	a := &apiClient{f: f, base: f.waitHTTPAPI(ctl, 30*time.Second)}
	nodeCreds, subCreds := creds("node", "n1"), creds("subscriber", "dash")
	data := filepath.Join(root, "n1")
	f.start("holder", nw.nodeNS["n1"], "holder", "--data", data, "--idle-exit=0") // its own service, as under systemd
	f.eventually(10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(data, "holder", "holder.sock"))
		return err == nil
	}, "the holder listens")
	nodeArgs := []string{"node", "--name", "n1", "--nats", natsURL, "--nats-creds", nodeCreds, "--data", data,
		"--gossip-listen", nodeGossip, "--gossip-key-file", gossipKeyFile, "--join", gossipA, "--holder"}
	agent := f.start("n1", nw.nodeNS["n1"], nodeArgs...)
	f.eventually(30*time.Second, func() bool { return a.serves("n1") }, "the controller reaches n1")

	col := &outCollector{chunks: map[string]map[int64][]byte{}, repeated: map[string]int64{}}
	nc, err := nats.Connect(natsURL, nats.UserCredentials(subCreds), nats.RootCAs(subCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("fleetmux.out.n1.*", col.take)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The upgrade (below): a newer binary, started after a graceful stop.
	newBin := filepath.Join(t.TempDir(), "fleetmux-new")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.9.9-upgrade", "-o", newBin, "./cmd/fleetmux")
	build.Dir = ".."
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the newer agent: %v\n%s", err, out)
	}
	const sessions, lines = 10, 400
	ids := make([]string, sessions)
	for i := range ids {
		var s api.Session
		a.call(http.MethodPost, "/v1/sessions", map[string]any{"node": "n1"}, http.StatusCreated, &s)
		ids[i] = s.ID
	}
	// Lines go on for ~6 s: across both restarts. The last session's long command
	// ends with 7 while no agent may be there.
	var longN int
	for i, id := range ids {
		cmd := fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s-line-$i"; sleep 0.02; done`, lines, id)
		if i == len(ids)-1 {
			cmd = `echo long-start; sleep 4; echo long-done; (exit 7)`
		}
		var r api.BlockResult
		a.call(http.MethodPost, "/v1/sessions/n1/"+id+"/run", map[string]any{"command": cmd, "timeout_ms": 1}, http.StatusOK, &r)
		if i == len(ids)-1 {
			longN = r.Block.N
		}
	}
	typed := time.Now()
	f.eventually(20*time.Second, func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		return len(col.chunks) == sessions
	}, "the subscriber gets output of every session")

	restart := func(how string, bin string) {
		t.Helper()
		if how == "kill" {
			// A request in flight (a wait for the long session's exit, which does not
			// come) fails within a second of the kill, with unavailable.
			wait := a.start(http.MethodGet, "/v1/sessions/n1/"+ids[len(ids)-1]+"/wait?until=exited&timeout_ms=30000", nil)
			// A request sent after it and answered means the wait got there (each
			// goes to the node at once); it has not returned.
			a.call(http.MethodGet, "/v1/sessions/n1/"+ids[len(ids)-1], nil, http.StatusOK, nil)
			if len(wait.res) != 0 {
				t.Fatalf("the wait for an exit that does not come returned: %+v", <-wait.res)
			}
			killed := time.Now()
			f.kill(agent)
			wait.failsFast(t, "wait", killed)
		} else {
			agent.signal(syscall.SIGTERM)
			select {
			case <-agent.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("the agent did not stop within 20s of SIGTERM")
			}
		}
		old := fleetmuxBin
		if bin != "" {
			fleetmuxBin = bin
		}
		agent = f.start("n1", nw.nodeNS["n1"], nodeArgs...)
		fleetmuxBin = old
		f.eventually(30*time.Second, func() bool {
			var l api.SessionList
			r := a.do(http.MethodGet, "/v1/sessions?node=n1", nil)
			if r.status != http.StatusOK || jsonDecode(r.body, &l) != nil || len(l.Sessions) != sessions {
				return false
			}
			for i, s := range l.Sessions {
				if s.ID != ids[i] {
					return false
				}
			}
			return true
		}, "the new agent (%s) serves the same %d sessions", how, sessions)
	}

	// Every command runs before the kill (so this test is about output, not about a
	// guard question asked again of the next agent: session's
	// TestHolderGuardQuestionAcrossRestart is).
	f.eventually(20*time.Second, func() bool {
		for i, id := range ids {
			want := id + "-line-1\r\n"
			if i == len(ids)-1 {
				want = "long-start\r\n"
			}
			if !strings.Contains(string(a.rawOutput("n1", id)), want) {
				return false
			}
		}
		return true
	}, "every command started")
	var before api.Session
	a.call(http.MethodGet, "/v1/sessions/n1/"+ids[len(ids)-1], nil, http.StatusOK, &before)
	if before.State != "running" {
		t.Fatalf("the long command is %s before the kill, want running", before.State)
	}
	restart("kill", "")
	// The upgrade: a newer binary, started after a graceful stop.
	restart("upgrade", newBin)
	f.eventually(30*time.Second, func() bool { return a.nodes()["n1"].Version == "v9.9.9-upgrade" }, "n1 runs the newer version")

	var long api.BlockResult
	if w := a.waitIdle("n1", ids[len(ids)-1]); !w.OK {
		t.Fatalf("the long command's session is not idle: %s, output at %d", w.Session.State, w.Session.OutputOffset)
	}
	a.call(http.MethodGet, fmt.Sprintf("/v1/sessions/n1/%s/blocks/%d", ids[len(ids)-1], longN), nil, http.StatusOK, &long)
	if long.Block.State != "done" || long.Block.ExitCode == nil || *long.Block.ExitCode != 7 || !strings.Contains(long.Text, "long-done") {
		t.Fatalf("the long command's block: %+v %q", long.Block, long.Text)
	}
	for _, id := range ids[:len(ids)-1] {
		w := a.waitIdle("n1", id)
		full := a.rawOutput("n1", id)
		sub, gaps := col.assemble(id, full)
		col.mu.Lock()
		repeated := col.repeated[id]
		col.mu.Unlock()
		if repeated != 0 {
			t.Errorf("%s: the subscriber got %d bytes twice", id, repeated)
		}
		var apiBad, subBad []string
		for i := 1; i <= lines; i++ {
			line := fmt.Sprintf("%s-line-%d\r\n", id, i)
			if n := strings.Count(string(full), line); n != 1 {
				apiBad = append(apiBad, fmt.Sprintf("%d×%d", i, n))
			}
			if n := strings.Count(string(sub), line); n != 1 {
				subBad = append(subBad, fmt.Sprintf("%d×%d", i, n))
			}
		}
		if len(apiBad) > 0 || len(subBad) > 0 || !w.OK {
			var blocks api.BlockList
			a.call(http.MethodGet, "/v1/sessions/n1/"+id+"/blocks", nil, http.StatusOK, &blocks)
			t.Fatalf("%s: lines not there exactly once (line×count) over the API %v, for the subscriber %v; the wait for idle: ok=%v state=%s output_offset=%d; blocks now %+v; %s; the output's end:\n%q",
				id, apiBad, subBad, w.OK, w.Session.State, w.Session.OutputOffset, blocks.Blocks, holderView(data, id), full[max(0, len(full)-400):])
		}
		t.Logf("%s: %d bytes, the subscriber filled %d gaps by offset; idle %v after the commands were typed", id, len(full), gaps, time.Since(typed).Round(time.Millisecond))
	}
}
