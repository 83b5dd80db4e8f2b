package sshd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestSSHWriterLease is the writer lease through the real stack: a person typing
// in an SSH attach (a real x/crypto/ssh client) holds it, so an agent's run is
// busy naming them; take_over gives it to the agent and the person is told in
// their terminal (and may take it back with Ctrl-T); once the person stops typing
// the lease lapses and a run works.
func TestSSHWriterLease(t *testing.T) {
	sf := newSSHFixture(t)
	s := sf.NewSession("n1")
	p := "/v1/sessions/n1/" + s.ID
	auditNC, audits := testutil.AuditSub(t, sf.NATS.ClientURL(), "n1")
	person := "ssh:" + ssh.FingerprintSHA256(sf.keys["operator"].PublicKey())
	op := sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "operator"), "", 24, 100)
	testutil.Eventually(t, 10*time.Second, func() bool { op.mu.Lock(); defer op.mu.Unlock(); return op.out.Len() > 0 }, "the attach's redraw")

	// The person types: an agent's run is busy, naming them.
	io.WriteString(op.in, "echo typed-$((6*7))\r")
	testutil.Eventually(t, 10*time.Second, op.has("typed-42"), "the person's command ran")
	busy := sf.APIErr(409, api.CodeBusy, "POST", p+"/run", api.RunBody{Command: "echo agent"}, api.HeaderActor, "agent-1")
	if !strings.Contains(busy.Message, person) || !strings.Contains(busy.Message, "typing in an attach") {
		t.Fatalf("busy names %q, want the person %s typing in an attach", busy.Message, person)
	}

	// The agent takes over: the reply and the person's terminal say so.
	var to api.TakeOver
	code, b := sf.Do("POST", p+"/take_over", nil, api.HeaderActor, "agent-1")
	if code != http.StatusOK || json.Unmarshal(b, &to) != nil {
		t.Fatalf("take_over: %d %s", code, b)
	}
	if to.Previous == nil || to.Previous.Principal != person || !to.Previous.Attach {
		t.Fatalf("take_over's previous writer %+v, want %s in an attach", to.Previous, person)
	}
	if rec := testutil.NextAudit(t, audits, "take_over"); rec.Detail != "from "+person || rec.Principal != "token:bootstrap" {
		t.Fatalf("take_over's audit record %+v, want the agent taking over from %s", rec, person)
	}
	auditNC.Close() // the records of the runs below would fill its channel
	testutil.Eventually(t, 10*time.Second, op.has("took n1/"+s.ID+" over"), "the person's notice of the take-over")
	if !op.has("token:bootstrap")() {
		t.Fatalf("the notice does not name the agent's token: %q", op.out.String())
	}

	// The agent runs; the person's keystrokes meanwhile are refused with a notice
	// and reach nothing; Ctrl-T takes the lease back while the run goes on.
	runDone := make(chan api.BlockResult, 1)
	go func() {
		var br api.BlockResult
		code, b := sf.Do("POST", p+"/run", api.RunBody{Command: "sleep 3; echo agent-$((6*7))", TimeoutMS: 20000}, api.HeaderActor, "agent-1")
		if code == http.StatusOK {
			json.Unmarshal(b, &br)
		}
		runDone <- br
	}()
	testutil.Eventually(t, 10*time.Second, func() bool {
		var got api.Session
		sf.Must(200, "GET", p, nil, &got)
		return got.State == api.StateRunning
	}, "the agent's run to start")
	io.WriteString(op.in, "x")
	testutil.Eventually(t, 10*time.Second, op.has("is running a command; retry when its block ends, or take it over"), "the person's busy notice")
	io.WriteString(op.in, "\x14")
	testutil.Eventually(t, 10*time.Second, op.has("you took n1/"+s.ID+" over from token:bootstrap"), "the person's take-back")
	io.WriteString(op.in, "echo back-$((6*7))\r") // typed ahead: runs after the agent's command
	if br := <-runDone; !strings.Contains(br.Text, "agent-42") {
		t.Fatalf("the agent's run: %+v", br)
	}
	testutil.Eventually(t, 10*time.Second, op.has("back-42"), "the person's line after taking it back")
	if _, raw := sf.Do("GET", p+"/output?from=0", nil); strings.Contains(string(raw), "xecho") {
		t.Fatalf("the person's refused keystroke reached the session: %q", raw)
	}

	// The person types again (holds the lease), then stops: the lease lapses and
	// the agent's run works.
	io.WriteString(op.in, "echo again-$((6*7))\r")
	testutil.Eventually(t, 10*time.Second, op.has("again-42"), "the person's last line")
	busy = sf.APIErr(409, api.CodeBusy, "POST", p+"/run", api.RunBody{Command: "echo agent"}, api.HeaderActor, "agent-1")
	if !strings.Contains(busy.Message, person) {
		t.Fatalf("busy names %q, want %s", busy.Message, person)
	}
	start := time.Now()
	testutil.Eventually(t, 20*time.Second, func() bool {
		code, _ := sf.Do("POST", p+"/run", api.RunBody{Command: "echo lapsed", TimeoutMS: 20000}, api.HeaderActor, "agent-1")
		return code == http.StatusOK
	}, "the agent's run once the lease lapsed")
	t.Logf("the lease lapsed %v after the busy run", time.Since(start).Round(time.Millisecond))
}

// TestWriterLeaseAgents: two agents' writes never interleave: one's half-typed
// line keeps the other's run out (busy naming it), and runs fired at once from
// both each either run whole or are refused, never mixed.
func TestWriterLeaseAgents(t *testing.T) {
	sf := newSSHFixture(t)
	s := sf.NewSession("n1")
	p := "/v1/sessions/n1/" + s.ID

	sf.Must(200, "POST", p+"/input", api.InputBody{Data: "echo half-"}, nil) // agent "api" (no actor header)
	busy := sf.APIErr(409, api.CodeBusy, "POST", p+"/run", api.RunBody{Command: "echo other"}, api.HeaderActor, "agent-2")
	if !strings.Contains(busy.Message, "token:bootstrap (api@127.0.0.1)") {
		t.Fatalf("busy names %q, want the first agent", busy.Message)
	}
	sf.Must(200, "POST", p+"/input", api.InputBody{Data: "line\n"}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool {
		_, raw := sf.Do("GET", p+"/output?from=0", nil)
		return strings.Contains(string(raw), "half-line\r\n")
	}, "the first agent's whole line")
	testutil.Eventually(t, 20*time.Second, func() bool { // the first agent's typing lease lapses
		code, _ := sf.Do("POST", p+"/run", api.RunBody{Command: "true", TimeoutMS: 20000}, api.HeaderActor, "agent-a")
		return code == http.StatusOK
	}, "a run once the first agent's lease lapsed")

	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[string]bool{}
	for _, agent := range []string{"agent-a", "agent-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				cmd := fmt.Sprintf("echo %s-%d", agent, i)
				code, b := sf.Do("POST", p+"/run", api.RunBody{Command: cmd, TimeoutMS: 20000}, api.HeaderActor, agent)
				switch code {
				case http.StatusOK:
					var br api.BlockResult
					if err := json.Unmarshal(b, &br); err != nil || br.Block.Command != cmd || strings.TrimSpace(br.Text) != fmt.Sprintf("%s-%d", agent, i) {
						t.Errorf("%s: block %+v text %q", cmd, br.Block, br.Text)
					}
					mu.Lock()
					ran[cmd] = true
					mu.Unlock()
				case http.StatusConflict:
				default:
					t.Errorf("%s: %d %s", cmd, code, b)
				}
			}
		}()
	}
	wg.Wait()
	var bl api.BlockList
	sf.Must(200, "GET", p+"/blocks", nil, &bl)
	for _, blk := range bl.Blocks[2:] {
		if !ran[blk.Command] {
			t.Errorf("block %d ran %q: not one whole command of an agent's successful run", blk.N, blk.Command)
		}
	}
	if len(bl.Blocks)-2 != len(ran) || len(ran) == 0 {
		t.Errorf("%d blocks after the first two, %d successful runs", len(bl.Blocks)-2, len(ran))
	}
	t.Logf("%d of 16 runs ran", len(ran))
}
