package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// TestHookChannel: an event sent with the agent's token reaches the handler and
// its answer comes back; a request without the token, or with another agent's,
// reaches nothing; a directory too long for a socket address works; a hook that
// gives up ends the handler's wait.
func TestHookChannel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 90), "agent")
	c, err := OpenHookChannel(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []HookEvent
	gaveUp := make(chan struct{})
	c.Serve(func(ctx context.Context, ev HookEvent, raw []byte) []byte {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
		switch {
		case ev.Name == "PermissionRequest" && ev.ToolName == "Wait":
			<-ctx.Done()
			close(gaveUp)
			return nil
		case ev.Name == "PermissionRequest":
			return PermissionAnswer(ToolInputText(ev.ToolName, ev.ToolInput) == "touch ok", "no")
		}
		return nil
	})
	defer c.Close()
	for _, fi := range []string{HookSocket, HookToken} {
		st, err := os.Stat(filepath.Join(dir, fi))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v, want 0600", fi, err, st.Mode())
		}
	}
	ctx := context.Background()
	out, err := SendHook(ctx, dir, []byte(`{"hook_event_name":"SessionStart","source":"startup"}`))
	if err != nil || len(out) != 0 {
		t.Fatalf("SessionStart: %q, %v", out, err)
	}
	for cmd, behavior := range map[string]string{"touch ok": "allow", "rm -rf /": "deny"} {
		in, _ := json.Marshal(map[string]any{"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": map[string]string{"command": cmd}})
		out, err = SendHook(ctx, dir, in)
		var ans struct {
			HookSpecificOutput struct {
				HookEventName string `json:"hookEventName"`
				Decision      struct{ Behavior string }
			}
		}
		if err != nil || json.Unmarshal(out, &ans) != nil || ans.HookSpecificOutput.Decision.Behavior != behavior || ans.HookSpecificOutput.HookEventName != "PermissionRequest" {
			t.Fatalf("PermissionRequest %q: %s, %v; want %s", cmd, out, err, behavior)
		}
	}

	// The attack: a peer that knows the socket but not this agent's token (another
	// agent's, none) is answered nothing and its event reaches nobody.
	other := t.TempDir()
	oc, err := OpenHookChannel(other, nil)
	if err != nil {
		t.Fatal(err)
	}
	oc.Close()
	if err := os.WriteFile(filepath.Join(other, HookToken), []byte(strings.Repeat("0", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(got)
	mu.Unlock()
	for _, head := range []string{"FMHOOK1 " + strings.Repeat("0", 64) + " 2\n{}", "FMHOOK1  2\n{}", `{"hook_event_name":"Stop"}` + "\n"} {
		var conn net.Conn
		err := inDir(dir, func(addr string) (err error) { // too long to dial directly
			conn, err = net.Dial("unix", addr+"/"+HookSocket)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte(head))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 16)
		if n, err := conn.Read(b); err == nil {
			t.Fatalf("request %q was answered %q", head, b[:n])
		}
		conn.Close()
	}
	mu.Lock()
	if len(got) != before {
		t.Fatalf("a request without the token reached the handler: %+v", got[before:])
	}
	mu.Unlock()

	// A hook that gives up (Claude Code killed it): the handler's ctx ends.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := SendHook(wctx, dir, []byte(`{"hook_event_name":"PermissionRequest","tool_name":"Wait"}`))
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == before+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting request did not arrive")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a hook that gave up: %v", err)
	}
	select {
	case <-gaveUp:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler still waits for a hook that gave up")
	}
}

func TestHookState(t *testing.T) {
	for _, c := range []struct {
		ev    HookEvent
		state string
		ok    bool
	}{
		{HookEvent{Name: "SessionStart", Source: "startup"}, api.AgentReady, true},
		{HookEvent{Name: "UserPromptSubmit"}, api.AgentWorking, true},
		{HookEvent{Name: "PreToolUse", ToolName: "Bash"}, api.AgentWorking, true},
		{HookEvent{Name: "PermissionRequest", ToolName: "Bash"}, api.AgentWaitingPermission, true},
		{HookEvent{Name: "Notification", NotificationType: "permission_prompt"}, api.AgentWaitingPermission, true},
		{HookEvent{Name: "Notification", NotificationType: "auth_success"}, "", false},
		{HookEvent{Name: "Stop"}, api.AgentReady, true},
		{HookEvent{Name: "SessionEnd", Reason: "clear"}, "", false},
		{HookEvent{Name: "SessionEnd", Reason: "prompt_input_exit"}, "", false}, // exited comes from the process
		{HookEvent{Name: "PreCompact"}, "", false},
	} {
		state, evidence, ok := HookState(c.ev)
		if state != c.state || ok != c.ok || ok && !strings.HasPrefix(evidence, c.ev.Name) {
			t.Errorf("%+v: %q %q %v, want %q %v", c.ev, state, evidence, ok, c.state, c.ok)
		}
	}
}

func TestWriteClaudeConfig(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	if err := WriteClaudeConfig(ClaudeConfig{Dir: dir, Workdir: work, Hook: []string{"/opt/it's/fleetmux", "agent-hook", dir}, KeyTail: "0123456789abcdefghij"}); err != nil {
		t.Fatal(err)
	}
	var settings struct {
		Hooks map[string][]struct {
			Matcher string
			Hooks   []struct{ Type, Command string }
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "settings.json"))
	if err := json.Unmarshal(b, &settings); err != nil {
		t.Fatal(err)
	}
	for _, ev := range HookEvents {
		h := settings.Hooks[ev]
		if len(h) != 1 || len(h[0].Hooks) != 1 || h[0].Hooks[0].Command != `'/opt/it'\''s/fleetmux' 'agent-hook' '`+dir+`'` {
			t.Fatalf("%s: %+v", ev, h)
		}
	}
	var state struct {
		HasCompletedOnboarding bool
		Projects               map[string]struct{ HasTrustDialogAccepted bool }
		CustomAPIKeyResponses  struct{ Approved []string } `json:"customApiKeyResponses"`
	}
	b, _ = os.ReadFile(filepath.Join(dir, ".claude.json"))
	if err := json.Unmarshal(b, &state); err != nil || !state.HasCompletedOnboarding || !state.Projects[work].HasTrustDialogAccepted || len(state.CustomAPIKeyResponses.Approved) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
}

func TestToolResponseText(t *testing.T) {
	for raw, want := range map[string]string{
		`"done"`: "done",
		`{"stdout":"a\n","stderr":"b","interrupted":false}`: "a\nb",
		`{"stdout":"","stderr":""}`:                         "",
		`{"filePath":"/x"}`:                                 `{"filePath":"/x"}`,
	} {
		if got := ToolResponseText(json.RawMessage(raw)); got != want {
			t.Errorf("%s: %q, want %q", raw, got, want)
		}
	}
}
