package httpapi_test

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

func (f *fixture) fanout(req api.FanoutRequest) api.Fanout {
	f.T.Helper()
	var out api.Fanout
	f.Must(200, "POST", "/v1/run", req, &out)
	return out
}

func TestFanout(t *testing.T) {
	f := newFixture(t, stack.Options{})

	// All nodes, fresh sessions: one result per node, sessions closed afterwards.
	out := f.fanout(api.FanoutRequest{Selector: api.Selector{All: true}, Command: "echo fan-$((1+1))"})
	if out.OK != 2 || out.Failed != 0 || len(out.Results) != 2 {
		t.Fatalf("all: %+v", out)
	}
	for i, r := range out.Results {
		if r.Node != []string{"n1", "n2"}[i] || r.Text != "fan-2" || r.Error != nil || r.ExitCode == nil || *r.ExitCode != 0 || r.Session == "" || r.Block == nil {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("fresh fan-out sessions left behind: %+v", list.Sessions)
	}

	// By label.
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{Labels: map[string]string{"role": "db"}}, Command: "echo db"})
	if len(out.Results) != 1 || out.Results[0].Node != "n2" || out.OK != 1 {
		t.Fatalf("by label: %+v", out)
	}

	// Named nodes, one unknown: reported, the others run.
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{Nodes: []string{"n1", "nope"}}, Command: "echo named"})
	if out.OK != 1 || out.Failed != 1 || out.Results[1].Node != "nope" || out.Results[1].Error == nil || out.Results[1].Error.Code != api.CodeNotFound {
		t.Fatalf("named: %+v", out)
	}

	// A session by title: created the first time, reused after (state carries over).
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{All: true}, Session: "work", Command: "cd /tmp && export FM_X=42"})
	if out.OK != 2 {
		t.Fatalf("titled, first: %+v", out)
	}
	first := map[string]string{}
	for _, r := range out.Results {
		first[r.Node] = r.Session
	}
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{All: true}, Session: "work", Command: "echo $PWD $FM_X"})
	for _, r := range out.Results {
		if r.Session != first[r.Node] || r.Text != "/tmp 42" {
			t.Fatalf("titled, second: %+v (first %v)", r, first)
		}
	}

	// Explicit sessions; a non-zero exit code is a failure with its code.
	addrs := []string{"n1/" + first["n1"], "n2/" + first["n2"]}
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{Sessions: addrs}, Command: `test "$(hostname)" = never`})
	if out.OK != 0 || out.Failed != 2 {
		t.Fatalf("exit 1: %+v", out)
	}
	for _, r := range out.Results {
		if r.ExitCode == nil || *r.ExitCode != 1 || r.Error == nil || r.Error.Code != api.CodeExitStatus {
			t.Fatalf("exit 1 result: %+v", r)
		}
	}

	// stop_on_failure with batch 1: the first target fails, the second never starts.
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{Sessions: addrs}, Command: "false", Batch: 1, StopOnFailure: true})
	if out.Failed != 2 || out.Results[0].Error.Code != api.CodeExitStatus || out.Results[1].Error.Code != api.CodeSkipped || out.Results[1].Block != nil {
		t.Fatalf("stop on failure: %+v", out)
	}
	// The skipped target really did not run: its last block is still the one before.
	var bl api.BlockList
	f.Must(200, "GET", "/v1/sessions/"+addrs[1]+"/blocks", nil, &bl)
	if last := bl.Blocks[len(bl.Blocks)-1]; last.Command == "false" {
		t.Fatalf("the skipped target ran: %+v", last)
	}

	// Per-target timeout: the block is still running, reported as a timeout; the
	// session is kept.
	out = f.fanout(api.FanoutRequest{Selector: api.Selector{Nodes: []string{"n1"}}, Command: "sleep 30", TimeoutMS: 300})
	r := out.Results[0]
	if out.Failed != 1 || r.Error == nil || r.Error.Code != api.CodeTimeout || r.Block == nil || r.Block.State != "running" || !strings.Contains(r.Error.Message, "kept") {
		t.Fatalf("timeout: %+v", out)
	}
	f.Must(200, "POST", "/v1/sessions/n1/"+r.Session+"/keys", api.KeysBody{Keys: []string{"C-c"}}, nil)
	var w api.WaitResult
	f.Must(200, "GET", "/v1/sessions/n1/"+r.Session+"/wait?until=idle&timeout_ms=10000", nil, &w)
	if !w.OK || w.Block.ExitCode == nil || *w.Block.ExitCode != 130 {
		t.Fatalf("after C-c: %+v", w)
	}
}
