package digest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func ptr[T any](v T) *T { return &v }

func block(n int, cmd string, start, ms int, code *int) api.Block {
	b := api.Block{N: n, Command: cmd, Cwd: "/srv/app", State: api.BlockDone, ExitCode: code, StartedAt: at(start)}
	f := at(start).Add(time.Duration(ms) * time.Millisecond)
	b.FinishedAt = &f
	return b
}

// mixed is a recorded fleet: failures (one with output), successes, a command
// held for approval, a decided one, an agent waiting for permission, a session
// waiting for input, a command still running, a new session.
func mixed() Snapshot {
	running := api.Block{N: 3, Command: "sleep 600", State: api.BlockRunning, StartedAt: at(50)}
	return Snapshot{
		Scope: api.ScopeFleet, Since: at(0), At: at(100),
		Sessions: []Session{
			{Session: api.Session{Node: "web-1", ID: "s2", State: api.StateIdle, CreatedAt: at(-3600)}, Blocks: []api.Block{
				block(7, "make test", 10, 4200, ptr(2)),
				block(8, "ls -la", 20, 15, ptr(0)),
				block(9, "git status\x1b[31m", 30, 80, ptr(0)),
			}},
			{Session: api.Session{Node: "web-1", ID: "s10", State: api.StateWaitingInput, CurrentCommand: "python3", CreatedAt: at(-60)}},
			{Session: api.Session{Node: "db-1", ID: "s1", State: api.StateRunning, CurrentCommand: "sleep 600", CreatedAt: at(40)}, Blocks: []api.Block{
				block(1, "psql -c 'select 1'", 41, 300, ptr(1)),
				block(2, "true", 45, 2, ptr(0)),
				running,
			}},
		},
		Texts: map[string]string{
			"web-1/s2#7": "=== RUN TestA\n--- FAIL: TestA (0.01s)\n    a_test.go:12: got 1, want 2\n[… 40 lines omitted …]\nFAIL\nexit status 1\n",
		},
		Approvals: []api.Approval{
			{ID: "a3", Node: "web-1", Session: "s2", Kind: api.ApprovalRun, Command: "rm -rf build", Principal: "token:bot", Rule: "ask-for-rm",
				State: api.ApprovalPending, RequestedAt: at(60), ExpiresAt: at(660)},
			{ID: "a2", Node: "web-1", Session: "s2", Kind: api.ApprovalRun, Command: "deploy prod", Principal: "token:bot", Rule: "prod",
				State: api.ApprovalApproved, RequestedAt: at(5), ExpiresAt: at(605), DecidedAt: ptr(at(8)), DecidedBy: "token:alice"},
			{ID: "a1", Node: "web-1", Kind: api.ApprovalRun, Command: "old", State: api.ApprovalDenied, RequestedAt: at(-500), DecidedAt: ptr(at(-400))},
		},
		Agents: []api.Agent{
			{Node: "web-1", ID: "s4", Driver: "claude", State: api.AgentWaitingPermission, StateSince: at(70), Evidence: "Bash(rm -rf node_modules)"},
			{Node: "db-1", ID: "s3", Driver: "codex", State: api.AgentDone, StateSince: at(90)},
			{Node: "db-1", ID: "s5", Driver: "codex", State: api.AgentReady, StateSince: at(-90)},
		},
	}
}

// big is a recorded fleet of 100 sessions with 100 blocks each since the cursor,
// every 37th failing.
func big() Snapshot {
	s := Snapshot{Scope: api.ScopeFleet, Since: at(0), At: at(20000), Texts: map[string]string{}}
	for i := 0; i < 100; i++ {
		se := Session{Session: api.Session{Node: fmt.Sprintf("n%d", i%10), ID: fmt.Sprintf("s%d", i/10+1), State: api.StateIdle, CreatedAt: at(-1)}}
		for n := 1; n <= 100; n++ {
			code := 0
			if (i*100+n)%37 == 0 {
				code = 1
			}
			se.Blocks = append(se.Blocks, block(n, fmt.Sprintf("step %d of job %d", n, i), i*100+n, 10*n, &code))
			if code != 0 && n%2 == 0 {
				s.Texts[Pointer(se.Node, se.ID, n)] = fmt.Sprintf("error: step %d\nline 2\nline 3\n", n)
			}
		}
		s.Sessions = append(s.Sessions, se)
	}
	return s
}

func golden(t *testing.T, name string, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test ./digest -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test ./digest -update rewrites it):\n%s", name, p, got)
	}
}

// TestGoldenMixed: the digest of a mixed fleet, in its order: what waits, pending
// approvals, failures with output, decided approvals, agents, sessions, running,
// successes; control characters never printed raw.
func TestGoldenMixed(t *testing.T) {
	d := Build(mixed(), 2000)
	golden(t, "mixed", d.Text)
	if d.Failed != 2 || d.Succeeded != 3 || d.Running != 1 || d.Waiting != 2 || d.Pending != 1 || d.Decided != 1 || d.Omitted != 0 {
		t.Errorf("counts %+v", d)
	}
	if strings.ContainsRune(d.Text, '\x1b') {
		t.Error("a control character reached the text")
	}
	if d.Next != api.DigestCursor(at(100)) || d.Since != api.DigestCursor(at(0)) {
		t.Errorf("cursors %s %s", d.Since, d.Next)
	}
	if again := Build(mixed(), 2000); again.Text != d.Text {
		t.Error("the same snapshot gave another text")
	}
}

// TestGoldenBudget: 10,000 blocks since the cursor: the digest holds its budget
// within ±10%, failures come before successes, and what is left out is counted
// and pointed at.
func TestGoldenBudget(t *testing.T) {
	for _, budget := range []int{300, 2000, 8000} {
		d := Build(big(), budget)
		if d.Tokens > budget || d.Tokens < budget*9/10 {
			t.Errorf("budget %d: %d tokens", budget, d.Tokens)
		}
		if d.Failed != 270 || d.Succeeded != 9730 || d.Omitted == 0 || len(d.ReadBlock) == 0 || !strings.Contains(d.Text, "left out for the budget") {
			t.Errorf("budget %d: counts %d failed %d ok %d omitted %d pointers", budget, d.Failed, d.Succeeded, d.Omitted, len(d.ReadBlock))
		}
		if f, o := strings.Index(d.Text, "\nFAILED\n"), strings.Index(d.Text, "\nOK\n"); f < 0 || o >= 0 && o < f {
			t.Errorf("budget %d: failures not first", budget)
		}
		if budget == 2000 {
			golden(t, "big-2000", d.Text)
		}
	}
}

// TestSinceWindow: what finished before the cursor or after the snapshot is not
// in it.
func TestSinceWindow(t *testing.T) {
	s := mixed()
	s.Since = at(35)
	d := Build(s, 2000)
	if strings.Contains(d.Text, "make test") || !strings.Contains(d.Text, "psql") || d.Decided != 0 {
		t.Errorf("window (35, 100]:\n%s", d.Text)
	}
}

func TestCursor(t *testing.T) {
	c := api.DigestCursor(at(5))
	if got, err := api.ParseDigestCursor(c); err != nil || !got.Equal(at(5)) {
		t.Errorf("cursor %s: %v %v", c, got, err)
	}
	for _, bad := range []string{"5", "cx", "c-1"} {
		if _, err := api.ParseDigestCursor(bad); err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}

func FuzzBuild(f *testing.F) {
	f.Add("make test\nx", 500, "out\x1b[2J\n")
	f.Fuzz(func(t *testing.T, cmd string, budget int, text string) {
		s := mixed()
		s.Sessions[0].Blocks[0].Command = cmd
		s.Texts["web-1/s2#7"] = text
		d := Build(s, budget)
		b := max(api.MinDigestTokens, min(budget, api.MaxDigestTokens))
		if d.Tokens > b {
			t.Fatalf("budget %d: %d tokens", b, d.Tokens)
		}
		if strings.ContainsAny(d.Text, "\x1b\r\x00") {
			t.Fatalf("control characters in %q", d.Text)
		}
	})
}
