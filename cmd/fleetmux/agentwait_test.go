package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	teststack "github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestAgentWaitTenOnTwoNodes: `fleetmux agent wait --state ready` on 10 agents
// spread over 2 nodes, which get ready 0.4 s apart, prints each agent's line as
// that agent gets ready, not when the last does.
func TestAgentWaitTenOnTwoNodes(t *testing.T) {
	f := teststack.New(t, teststack.Options{}) // n1 and n2
	t.Setenv(envAddr, f.Base)
	t.Setenv(envToken, f.Token)
	rules := filepath.Join(t.TempDir(), "tiny.rules")
	if err := os.WriteFile(rules, []byte("version 1\nname tiny/1\nrule prompt ready -- READY>\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 10
	var addrs []string
	for i := range n {
		out, errOut, err := runArgs(t, "agent", "spawn", []string{"n1", "n2"}[i%2], "--driver", "generic", "--program", "sh", "--rules", rules,
			"--", "-c", fmt.Sprintf("sleep %.1f; printf 'READY> '; exec cat", 1+0.4*float64(i)))
		if err != nil {
			t.Fatalf("spawn %d: %v: %s", i, err, errOut)
		}
		addrs = append(addrs, strings.TrimSpace(out))
	}
	var lt lineTimes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb strings.Builder
	if err := run(ctx, append([]string{"agent", "wait", "--state", "ready", "--timeout", "30s"}, addrs...), &lt, &errb); err != nil {
		t.Fatalf("agent wait: %v: %s", err, errb.String())
	}
	if len(lt.lines) != n {
		t.Fatalf("agent wait printed %d lines, want %d: %q", len(lt.lines), n, lt.lines)
	}

	out, _, err := runArgs(t, "agent", "ls", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list api.AgentList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("agent ls --json: %v\n%s", err, out)
	}
	readyAt := map[string]time.Time{}
	nodes := map[string]bool{}
	for _, a := range list.Agents {
		if a.State != api.AgentReady {
			t.Fatalf("%s is %s", a.Address(), a.State)
		}
		readyAt[a.Address()], nodes[a.Node] = a.StateSince, true
	}
	if len(readyAt) != n || len(nodes) != 2 {
		t.Fatalf("agents %v on nodes %v", readyAt, nodes)
	}
	seen := map[string]bool{}
	for i, l := range lt.lines {
		addr, _, _ := strings.Cut(l, " ")
		at, ok := readyAt[addr]
		if !ok || seen[addr] || !strings.HasPrefix(l, addr+" ready (screen: rule prompt: READY>") {
			t.Fatalf("line %d: %q", i, l)
		}
		seen[addr] = true
		// Printed after it got ready, and soon after: not held for the others.
		if lag := lt.at[i].Sub(at); lag < 0 || lag > 2*time.Second {
			t.Errorf("%s printed %v after it was ready (at %s), want within 2 s", addr, lag.Round(time.Millisecond), at.Format("15:04:05.000"))
		}
	}
	if spread := lt.at[n-1].Sub(lt.at[0]); spread < 2*time.Second {
		t.Errorf("the first and the last line were printed %v apart: not as each was ready", spread)
	}
	t.Logf("%d agents on 2 nodes; lines printed %v apart, first to last", n, lt.at[n-1].Sub(lt.at[0]).Round(time.Millisecond))
}
