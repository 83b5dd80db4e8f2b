package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// buildFake builds the fake TUI (testdata/faketui) into a temporary dir.
func buildFake(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found in PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "faketui")
	cmd := exec.Command(goBin, "build", "-o", bin, "./testdata/faketui")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/faketui: %v\n%s", err, out)
	}
	return bin
}

// events collects the agent events of a stack's NATS server, per agent.
type events struct {
	mu  sync.Mutex
	got map[string][]api.AgentEvent
}

func watchEvents(t *testing.T, f *stack.Stack) *events {
	t.Helper()
	nc, err := nats.Connect(f.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ev := &events{got: map[string][]api.AgentEvent{}}
	sub, err := nc.Subscribe(api.Subjects{}.All(api.KindAgent, "*"), func(m *nats.Msg) {
		var e api.AgentEvent
		if json.Unmarshal(m.Data, &e) == nil {
			ev.mu.Lock()
			ev.got[e.Node+"/"+e.Agent] = append(ev.got[e.Node+"/"+e.Agent], e)
			ev.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ev
}

func (ev *events) of(addr string) []api.AgentEvent {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return slices.Clone(ev.got[addr])
}

// waitState waits (GET …/wait) until the agent is in state, within d.
func waitState(t *testing.T, f *stack.Stack, a api.Agent, state string, d time.Duration) api.Agent {
	t.Helper()
	var w api.AgentWaitReply
	start := time.Now()
	f.Must(http.StatusOK, "GET", fmt.Sprintf("/v1/agents/%s/%s/wait?state=%s&timeout_ms=%d", a.Node, a.ID, state, d.Milliseconds()), nil, &w)
	if !w.OK {
		t.Fatalf("%s %s: not %s within %v: %s from %s (%s)", a.Driver, a.Address(), state, d, w.Agent.State, w.Agent.StateSource, w.Agent.Evidence)
	}
	t.Logf("%s %s: %s after %v (%s)", a.Driver, a.Address(), state, time.Since(start).Round(time.Millisecond), w.Agent.Evidence)
	return w.Agent
}

// busy is how long the fake TUI works on a prompt: each state must be seen well
// within it, and within a second of the screen showing it.
const busy = 1500 * time.Millisecond

// TestScreenRulesThroughAFleet spawns the fake TUI under every built-in driver
// through a real controller and node, and drives it through boot, ready, a
// prompt, a permission dialog and back to ready: with no hook, the screen rules
// alone get every state, each within a second of the screen showing it.
func TestScreenRulesThroughAFleet(t *testing.T) {
	bin := buildFake(t)
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	ev := watchEvents(t, f)
	for _, driver := range []string{api.DriverClaude, api.DriverCodex, api.DriverOpenCode, api.DriverGemini, api.DriverAider} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			args := []string{"-driver", driver, "-busy", busy.String()}
			if driver == api.DriverClaude {
				args = append(args, "-trust") // a first-run dialog the driver answers
			}
			var a api.Agent
			f.Must(http.StatusCreated, "POST", "/v1/agents", api.SpawnRequest{Node: "n1", Driver: driver, Program: bin, Args: args}, &a)
			if a.Driver != driver || !strings.HasPrefix(a.Rules, driver+"/") || a.Depth != 1 || a.Parent == "" || strings.Contains(a.Parent, "/") {
				t.Fatalf("spawned %+v", a)
			}
			r := waitState(t, f, a, api.AgentReady, 5*time.Second)
			if r.StateSource != api.SourceScreen || !strings.HasPrefix(r.Evidence, "rule ") {
				t.Fatalf("ready from %s (%q), want a screen rule", r.StateSource, r.Evidence)
			}
			p := "/v1/agents/" + a.Node + "/" + a.ID
			f.Must(http.StatusOK, "POST", p+"/send", api.AgentSendBody{Text: "please ask for perm"}, nil)
			waitState(t, f, a, api.AgentWorking, time.Second)
			d := waitState(t, f, a, api.AgentWaitingPermission, busy+time.Second)
			if !strings.Contains(d.Evidence, "rule ") {
				t.Fatalf("dialog evidence %q", d.Evidence)
			}
			// The agent is a session too: its screen shows the dialog, and a key
			// typed there answers it.
			var scr api.Screen
			f.Must(http.StatusOK, "GET", "/v1/sessions/"+a.Node+"/"+a.ID+"/screen", nil, &scr)
			if !scr.AltScreen || !strings.Contains(scr.Text, "touch") {
				t.Fatalf("the agent's session screen: %+v", scr)
			}
			var ses api.Session
			f.Must(http.StatusOK, "GET", "/v1/sessions/"+a.Node+"/"+a.ID, nil, &ses)
			if ses.Agent != driver {
				t.Fatalf("the agent's session says agent %q, want %q", ses.Agent, driver)
			}
			f.Must(http.StatusOK, "POST", "/v1/sessions/"+a.Node+"/"+a.ID+"/keys", api.KeysBody{Keys: []string{"Enter"}}, nil)
			waitState(t, f, a, api.AgentWorking, time.Second)
			waitState(t, f, a, api.AgentReady, busy+time.Second)

			// Interrupted while it works: ready again at once (claude with the
			// prompt back in its composer, which the next prompt is not glued to).
			f.Must(http.StatusOK, "POST", p+"/send", api.AgentSendBody{Text: "a long task"}, nil)
			waitState(t, f, a, api.AgentWorking, time.Second)
			f.Must(http.StatusOK, "POST", p+"/interrupt", nil, nil)
			waitState(t, f, a, api.AgentReady, time.Second)
			if driver == api.DriverClaude {
				f.Must(http.StatusOK, "GET", "/v1/sessions/"+a.Node+"/"+a.ID+"/screen", nil, &scr)
				if !strings.Contains(scr.Text, "❯ a long task") {
					t.Fatalf("the interrupted prompt is not back in the composer:\n%s", scr.Text)
				}
			}

			var out api.AgentOutput
			f.Must(http.StatusOK, "GET", p+"/output", nil, &out)
			if !strings.Contains(out.Text, "touch marker") || out.Cursor == 0 || out.Screen == "" {
				t.Fatalf("output: %+v", out)
			}
			var more api.AgentOutput
			f.Must(http.StatusOK, "GET", fmt.Sprintf("%s/output?cursor=%d", p, out.Cursor), nil, &more)
			if more.Text != "" || more.Cursor != out.Cursor {
				t.Fatalf("output past the cursor: %+v", more)
			}

			f.Must(http.StatusOK, "POST", p+"/send", api.AgentSendBody{Text: "/exit"}, nil)
			x := waitState(t, f, a, api.AgentExited, 2*time.Second)
			if x.StateSource != api.SourceProcess || x.ExitCode == nil || *x.ExitCode != 0 {
				t.Fatalf("exited: %+v", x)
			}

			// Every change was published, each with its source and evidence.
			var seq []string
			testutil.Eventually(t, 5*time.Second, func() bool {
				seq = seq[:0]
				for _, e := range ev.of(a.Address()) {
					if e.Type == api.AgentEventState {
						seq = append(seq, e.State+"/"+e.Source)
						if e.Evidence == "" {
							return false
						}
					}
				}
				return len(seq) > 0 && seq[len(seq)-1] == api.AgentExited+"/"+api.SourceProcess
			}, "the exit's event")
			want := []string{"ready/screen", "working/screen", "waiting_permission/screen", "working/screen", "ready/screen", "working/screen", "ready/screen", "exited/process"}
			if strings.Join(seq, " ") != strings.Join(want, " ") {
				t.Fatalf("events %v, want %v", seq, want)
			}
		})
	}
}

// TestWaitAfterSend: a wait for ready right after a prompt (the spawn's, then a
// send's) waits for that prompt's turn to end, not the ready before it.
func TestWaitAfterSend(t *testing.T) {
	bin := buildFake(t)
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	ev := watchEvents(t, f)
	var a api.Agent
	f.Must(http.StatusCreated, "POST", "/v1/agents", api.SpawnRequest{Node: "n1", Driver: api.DriverCodex, Program: bin,
		Args: []string{"-driver", "codex", "-busy", busy.String()}, Prompt: "the first task"}, &a)
	worked := func() int {
		n := 0
		for _, e := range ev.of(a.Address()) {
			if e.Type == api.AgentEventState && e.State == api.AgentWorking {
				n++
			}
		}
		return n
	}
	r := waitState(t, f, a, api.AgentReady, 10*time.Second)
	if n := worked(); n != 1 {
		t.Fatalf("ready (%s, since %s) after %d turns of the spawn's prompt, want 1", r.Evidence, r.StateSince, n)
	}
	p := "/v1/agents/" + a.Node + "/" + a.ID
	t0 := time.Now()
	f.Must(http.StatusOK, "POST", p+"/send", api.AgentSendBody{Text: "the second task"}, nil)
	r = waitState(t, f, a, api.AgentReady, 10*time.Second)
	if n := worked(); n != 2 || !r.StateSince.After(t0) {
		t.Fatalf("ready since %s (sent at %s) after %d turns, want the second task's turn done", r.StateSince, t0, n)
	}
}

// spawnGeneric spawns a tiny TUI under the generic driver (ready at its prompt).
func spawnGeneric(f *stack.Stack, node, parent string) (api.Agent, int, []byte) {
	body := api.SpawnRequest{Node: node, Driver: api.DriverGeneric, Parent: parent, Program: "sh",
		Args: []string{"-c", "printf 'READY> '; exec cat"}, Rules: "version 1\nrule prompt ready -- READY>\n"}
	code, b := f.Do("POST", "/v1/agents", body)
	var a api.Agent
	_ = json.Unmarshal(b, &a)
	return a, code, b
}

// TestAgentTree: children of an agent on two nodes are listed under it; an 11th
// child and a grandchild (depth 3) are refused with a limit error; killing the
// parent ends every child. Waits on several agents return as each is ready.
func TestAgentTree(t *testing.T) {
	f := stack.New(t, stack.Options{})
	root, code, b := spawnGeneric(f, "n1", "")
	if code != http.StatusCreated {
		t.Fatalf("root: %d %s", code, b)
	}
	var kids []api.Agent
	for i := range api.MaxChildren {
		k, code, b := spawnGeneric(f, []string{"n1", "n2"}[i%2], root.Address())
		if code != http.StatusCreated || k.Parent != root.Address() || k.Depth != 2 {
			t.Fatalf("child %d: %d %s", i, code, b)
		}
		kids = append(kids, k)
	}
	// Each is ready, seen by a wait of its own.
	var wg sync.WaitGroup
	for _, k := range append([]api.Agent{root}, kids...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w api.AgentWaitReply
			code, b := f.Do("GET", "/v1/agents/"+k.Node+"/"+k.ID+"/wait?state=ready&timeout_ms=10000", nil)
			if code != http.StatusOK || json.Unmarshal(b, &w) != nil || !w.OK {
				t.Errorf("%s not ready: %d %s", k.Address(), code, b)
			}
		}()
	}
	wg.Wait()

	for _, c := range []struct{ node, parent, what string }{
		{"n2", root.Address(), "an 11th child"},
		{"n1", kids[0].Address(), "a grandchild on the child's node"},
		{"n1", kids[1].Address(), "a grandchild on another node"},
	} {
		_, _, b := spawnGeneric(f, c.node, c.parent)
		var e api.ErrorReply
		if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Code != api.CodeLimit {
			t.Fatalf("%s: %s, want a limit error", c.what, b)
		}
		t.Logf("%s: %s", c.what, e.Error.Message)
	}

	var list api.AgentList
	f.Must(http.StatusOK, "GET", "/v1/agents", nil, &list)
	i := slices.IndexFunc(list.Agents, func(a api.Agent) bool { return a.Address() == root.Address() })
	if i < 0 || len(list.Agents[i].Children) != api.MaxChildren || len(list.Agents) != 1+api.MaxChildren {
		t.Fatalf("list: %+v", list.Agents)
	}

	f.Must(http.StatusOK, "DELETE", "/v1/agents/"+root.Node+"/"+root.ID, nil, nil)
	for _, k := range append([]api.Agent{root}, kids...) {
		f.APIErr(http.StatusNotFound, api.CodeNotFound, "GET", "/v1/agents/"+k.Node+"/"+k.ID, nil)
	}
	f.Must(http.StatusOK, "GET", "/v1/agents", nil, &list)
	if len(list.Agents) != 0 {
		t.Fatalf("agents left: %+v", list.Agents)
	}
}

// TestAgentTreeLimitsByPolicy: a policy's agents section changes the tree
// limits: with max_depth 3 and max_children 2, a grandchild may spawn (on
// either node) and a third child or a great-grandchild may not; killing the root
// ends every level.
func TestAgentTreeLimitsByPolicy(t *testing.T) {
	f := stack.New(t, stack.Options{Policy: true})
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "default", "action": "allow"}],
		"agents": {"max_depth": 3, "max_children": 2}}`), nil)
	var root api.Agent
	testutil.Eventually(t, 10*time.Second, func() bool { // the nodes apply the policy within a second
		var code int
		var b []byte
		root, code, b = spawnGeneric(f, "n1", "")
		return code == http.StatusCreated && json.Unmarshal(b, &root) == nil
	}, "a root agent under the policy")
	spawn := func(node, parent string, want int, what string) api.Agent {
		t.Helper()
		a, code, b := spawnGeneric(f, node, parent)
		if code != want {
			t.Fatalf("%s: %d %s, want %d", what, code, b, want)
		}
		if want != http.StatusCreated {
			var e api.ErrorReply
			if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Code != api.CodeLimit {
				t.Fatalf("%s: %s, want a limit error", what, b)
			}
			t.Logf("%s: %s", what, e.Error.Message)
		}
		return a
	}
	var all []api.Agent
	for i := range 2 {
		all = append(all, spawn([]string{"n1", "n2"}[i], root.Address(), http.StatusCreated, "a child"))
	}
	spawn("n2", root.Address(), http.StatusTooManyRequests, "a third child")
	var grand []api.Agent
	for _, k := range all {
		g := spawn("n1", k.Address(), http.StatusCreated, "a grandchild")
		if g.Depth != 3 {
			t.Fatalf("grandchild at depth %d", g.Depth)
		}
		grand = append(grand, g)
	}
	spawn("n2", grand[0].Address(), http.StatusTooManyRequests, "a great-grandchild")
	all = append(append(all, grand...), root)
	f.Must(http.StatusOK, "DELETE", "/v1/agents/"+root.Node+"/"+root.ID, nil, nil)
	for _, k := range all {
		f.APIErr(http.StatusNotFound, api.CodeNotFound, "GET", "/v1/agents/"+k.Node+"/"+k.ID, nil)
	}
}

// TestAgentSecret: a node secret reaches an agent's environment only when a
// secrets entry of the policy names the agent's driver, and its value is in no
// reply: not the spawn's, not the list's, not the output's or the screen's
// (redacted there like every stored secret).
func TestAgentSecret(t *testing.T) {
	const value = "sk-fake-0123456789abcdef"
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true})
	f.Must(http.StatusOK, "PUT", "/v1/nodes/n1/secrets/model-key", api.SecretBody{Value: value}, nil)
	body := api.SpawnRequest{Node: "n1", Driver: api.DriverGeneric, Program: "sh", Secrets: map[string]string{"API_KEY": "model-key"},
		Args:  []string{"-c", `printf 'key=%s\n' "$API_KEY"; printf 'READY> '; exec cat`},
		Rules: "version 1\nrule prompt ready -- READY>\n"}
	// A policy without an entry for agents: refused (sudo's entry is sudo's).
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "default", "action": "allow"}],
		"secrets": [{"name": "model-key", "roles": ["admin"]}]}`), nil)
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, b := f.Do("POST", "/v1/agents", body)
		return code == http.StatusForbidden && strings.Contains(string(b), `"denied"`) && !strings.Contains(string(b), value)
	}, "a spawn with a secret no entry gives agents refused")
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "default", "action": "allow"}],
		"secrets": [{"name": "model-key", "roles": ["admin"], "programs": ["agent:generic"]}]}`), nil)
	var raw []byte
	testutil.Eventually(t, 10*time.Second, func() bool {
		var code int
		code, raw = f.Do("POST", "/v1/agents", body)
		return code == http.StatusCreated
	}, "a spawn with a secret the policy gives it")
	var a api.Agent
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	waitState(t, f, a, api.AgentReady, 5*time.Second)
	var out api.AgentOutput
	f.Must(http.StatusOK, "GET", "/v1/agents/n1/"+a.ID+"/output", nil, &out)
	if !strings.Contains(out.Text, "key=[REDACTED:secret-model-key]") {
		t.Fatalf("the agent did not get its key, redacted: %q", out.Text)
	}
	for _, p := range []string{"/v1/agents", "/v1/agents/n1/" + a.ID, "/v1/agents/n1/" + a.ID + "/output", "/v1/sessions/n1/" + a.ID + "/screen",
		"/v1/sessions/n1/" + a.ID + "/output?from=0", "/v1/sessions/n1/" + a.ID} {
		code, b := f.Do("GET", p, nil)
		if code != http.StatusOK || strings.Contains(string(raw)+string(b), value) {
			t.Fatalf("GET %s (%d) holds the secret: %s", p, code, b)
		}
	}
}

// TestHeldSpawn: a spawn an approve rule holds is an approval like a held
// create; once another admin approves it, it is an agent (not a bare session),
// tracked to ready.
func TestHeldSpawn(t *testing.T) {
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true, Policy: true})
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [
		{"name": "agents-need-a-human", "match": {"command": "held-agent"}, "action": "approve"},
		{"name": "default", "action": "allow"}]}`), nil)
	body := api.SpawnRequest{Node: "n1", Driver: api.DriverGeneric, Program: "sh",
		Args: []string{"-c", "printf 'READY> '; exec cat", "held-agent"}, Rules: "version 1\nrule prompt ready -- READY>\n"}
	var held api.ErrorReply
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, b := f.Do("POST", "/v1/agents", body)
		return code == http.StatusConflict && json.Unmarshal(b, &held) == nil && held.Error != nil && held.Error.Approval != ""
	}, "the spawn held by the policy")
	var nt api.NewToken
	f.Must(http.StatusOK, "POST", "/v1/tokens", api.TokenRequest{Name: "approver", Role: api.RoleAdmin}, &nt)
	asker := f.Token
	f.Token = nt.Secret
	var ap api.Approval
	f.Must(http.StatusOK, "POST", "/v1/approvals/"+held.Error.Approval, api.DecideBody{Decision: api.DecisionApprove}, &ap)
	f.Token = asker
	testutil.Eventually(t, 10*time.Second, func() bool {
		f.Must(http.StatusOK, "GET", "/v1/approvals/"+held.Error.Approval, nil, &ap)
		return ap.Session != ""
	}, "the approved spawn's session")
	var a api.Agent
	f.Must(http.StatusOK, "GET", "/v1/agents/n1/"+ap.Session, nil, &a)
	if a.Driver != api.DriverGeneric || a.Rules != "generic" || a.Owner == "" {
		t.Fatalf("the approved spawn: %+v", a)
	}
	waitState(t, f, a, api.AgentReady, 5*time.Second)
}
