package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// lineTimes records when each line written to it arrived.
type lineTimes struct {
	mu    sync.Mutex
	buf   string
	lines []string
	at    []time.Time
}

func (l *lineTimes) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf += string(p)
	for {
		i := strings.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.lines, l.at = append(l.lines, l.buf[:i]), append(l.at, time.Now())
		l.buf = l.buf[i+1:]
	}
}

// TestAgentCLI: agents spawned with the CLI on fleetmux dev; `agent wait` on
// three of them prints each as it becomes ready (they take different times), then
// ls, send, logs and kill work on them.
func TestAgentCLI(t *testing.T) {
	startDev(t)
	rules := filepath.Join(t.TempDir(), "tiny.rules")
	if err := os.WriteFile(rules, []byte("version 1\nname tiny/1\nrule prompt ready -- READY>\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, delay := range []string{"0", "1.2", "2.4"} {
		out, errOut, err := runArgs(t, "agent", "spawn", "here", "--driver", "generic", "--program", "sh", "--rules", rules,
			"--", "-c", "sleep "+delay+"; printf 'READY> '; exec cat")
		if err != nil {
			t.Fatalf("spawn: %v: %s", err, errOut)
		}
		addrs = append(addrs, strings.TrimSpace(out))
	}
	var lt lineTimes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb strings.Builder
	if err := run(ctx, append([]string{"agent", "wait", "--state", "ready", "--timeout", "20s"}, addrs...), &lt, &errb); err != nil {
		t.Fatalf("agent wait: %v: %s", err, errb.String())
	}
	if len(lt.lines) != 3 {
		t.Fatalf("agent wait printed %q", lt.lines)
	}
	for i, l := range lt.lines {
		if !strings.HasPrefix(l, addrs[i]+" ready (screen: rule prompt: READY>") {
			t.Errorf("line %d: %q, want %s ready first", i, l, addrs[i])
		}
	}
	if gap := lt.at[2].Sub(lt.at[0]); gap < time.Second {
		t.Errorf("the first and the last agent were printed %v apart: not as each was ready", gap)
	}

	out, _, err := runArgs(t, "agent", "ls")
	if err != nil || strings.Count(out, " ready ") != 3 || !strings.Contains(out, "AGENT") {
		t.Fatalf("agent ls: %v\n%s", err, out)
	}
	if _, errOut, err := runArgs(t, "agent", "send", addrs[0], "hello", "there"); err != nil {
		t.Fatalf("agent send: %v: %s", err, errOut)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		logs, _, err := runArgs(t, "agent", "logs", addrs[0])
		return err == nil && strings.Contains(logs, "hello there")
	}, "agent logs to show the prompt")
	if out, errOut, err := runArgs(t, "agent", "kill", addrs[0]); err != nil || !strings.HasPrefix(out, addrs[0]+" exited") {
		t.Fatalf("agent kill: %v: %s%s", err, out, errOut)
	}
	if _, _, err := runArgs(t, "agent", "wait", addrs[0]); exitCode(err) != 1 {
		t.Fatalf("agent wait on a killed agent: %v (exit %d), want 1", err, exitCode(err))
	}
	if _, _, err := runArgs(t, "agent", "spawn", "--driver", "vim"); exitCode(err) != 1 {
		t.Fatalf("spawn of an unknown driver: %v, want exit 1", err)
	}
	if _, _, err := runArgs(t, "agent", "spawn", "here"); exitCode(err) != 2 {
		t.Fatalf("spawn without --driver: %v, want exit 2", err)
	}
}

// TestPrintAgentsTree: ls prints each child under its parent, indented, and an
// agent whose parent is not listed (a principal, or an agent gone) as a root.
func TestPrintAgentsTree(t *testing.T) {
	now := time.Now()
	ag := func(node, id, parent string) api.Agent {
		return api.Agent{Node: node, ID: id, Parent: parent, Driver: "claude", State: api.AgentReady, StateSource: api.SourceScreen,
			StateSince: now, Evidence: "rule ready-shortcuts: ? for shortcuts\x1b[31m"}
	}
	var b strings.Builder
	err := printAgents(&b, api.AgentList{Agents: []api.Agent{
		ag("a", "s1", "token:ci"), ag("a", "s2", "a/s1"), ag("b", "s1", "a/s1"), ag("b", "s2", "b/s9"), ag("b", "s3", "b/s1"),
	}, Unavailable: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "/") {
			order = append(order, strings.Repeat(">", (len(l)-len(strings.TrimLeft(l, " ")))/2)+f[0])
		}
	}
	if got := strings.Join(order, " "); got != "a/s1 >a/s2 >b/s1 >>b/s3 b/s2" {
		t.Fatalf("tree %q:\n%s", got, b.String())
	}
	if strings.Contains(b.String(), "\x1b") || !strings.Contains(b.String(), "did not answer: [c]") {
		t.Fatalf("ls output:\n%q", b.String())
	}
}
