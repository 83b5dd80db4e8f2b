package node_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestOpenCodeReadyOffline: the real OpenCode (pinned, from npm), spawned as an
// agent on a fresh machine (an empty HOME) with no network at all (its own
// network namespace, as root), reaches ready: its composer, read by the
// opencode driver's screen rules.
func TestOpenCodeReadyOffline(t *testing.T) {
	oc := testutil.NeedOpenCode(t)
	f := newFixture(t)
	program, args := oc, []string(nil)
	if testutil.WantRoot(t) {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			testutil.Missing(t, "unshare (util-linux) to take the network away")
		}
		program, args = unshare, []string{"-n", oc} // no interface but a loopback that is down
	}
	env := testutil.OpenCodeOffline()
	env["HOME"] = t.TempDir() // a first run
	start := time.Now()
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, api.SpawnRequest{Driver: api.DriverOpenCode, Program: program, Args: args, Cwd: t.TempDir(), Env: env}, &a)
	var r api.AgentWaitReply
	for deadline := time.Now().Add(90 * time.Second); !r.OK && time.Now().Before(deadline); {
		f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: a.ID, States: []string{api.AgentReady, api.AgentExited, api.AgentError}, TimeoutMS: 20000}, &r)
	}
	if !r.OK || r.Agent.State != api.AgentReady {
		var sc api.Screen
		_ = f.call("screen", api.SessionRequest{Session: a.ID}, &sc)
		t.Fatalf("opencode: %s from %s (%q) after %v, want ready; its screen:\n%s", r.Agent.State, r.Agent.StateSource, r.Agent.Evidence, time.Since(start), sc.Text)
	}
	t.Logf("spawn → ready in %v (%s: %s)", time.Since(start).Round(time.Millisecond), r.Agent.StateSource, r.Agent.Evidence)
	f.mustCall(api.VerbAgentKill, api.AgentRequest{Agent: a.ID}, nil)
}
