package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestMCPFullScreen drives full-screen programs over `fleetmux mcp` with a real
// dev: run_command of vim answers with vim's screen and keys for vim (it said
// "(no output)" and pointed at send_input); run_command with vim or top in
// front is refused busy naming the program, and types nothing (it typed
// "echo hi" into top, whose e switched units); send_keys quits them.
func TestMCPFullScreen(t *testing.T) {
	vim := testutil.NeedTool(t, "vim")
	top := testutil.NeedTool(t, "top")
	addr := startDev(t)
	cs, _ := stdioMCP(t, "--addr", addr)
	var s struct{ Node, ID string }
	if text, isErr := callTool(t, cs, "create_session", map[string]any{"title": "full-screen"}, &s); isErr {
		t.Fatal(text)
	}
	where := map[string]any{"node": s.Node, "session": s.ID}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"node": s.Node, "session": s.ID}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	if text, isErr := callTool(t, cs, "run_command", with("command", "printf 'alpha\\nbeta\\n' > notes.txt"), nil); isErr {
		t.Fatal(text)
	}
	for _, p := range []struct {
		name, cmd, screen string
		quit              []string
	}{
		{"vim", vim + " -u NONE -i NONE -N -n notes.txt", "alpha", []string{"Esc", ":", "q", "!", "Enter"}},
		{"top", top + " -d 5", "load average", []string{"q"}},
	} {
		var b struct {
			State      string `json:"state"`
			FullScreen string `json:"full_screen"`
		}
		text, isErr := callTool(t, cs, "run_command", with("command", p.cmd, "timeout_ms", 3000), &b)
		if isErr || b.FullScreen != p.name || !strings.Contains(text, p.screen) || strings.Contains(text, "(no output)") || strings.Contains(text, "send_input") {
			t.Fatalf("run_command %s: error %v, %+v:\n%s", p.name, isErr, b, text)
		}
		text, isErr = callTool(t, cs, "run_command", with("command", "echo hi"), nil)
		if !isErr || !strings.Contains(text, p.name+" is running full-screen") || !strings.Contains(text, "send_keys") || strings.Contains(text, "send_input") {
			t.Fatalf("run_command echo hi with %s in front: error %v:\n%s", p.name, isErr, text)
		}
		text, _ = callTool(t, cs, "read_screen", where, nil)
		if strings.Contains(text, "echo hi") {
			t.Errorf("echo hi was typed into %s:\n%s", p.name, text)
		}
		if text, isErr := callTool(t, cs, "send_keys", with("keys", p.quit), nil); isErr {
			t.Fatal(text)
		}
		var w struct {
			State        string `json:"state"`
			SessionState string `json:"session_state"`
		}
		testutil.Eventually(t, 20*time.Second, func() bool {
			callTool(t, cs, "wait_for", with("timeout_ms", 5000), &w)
			return w.State == "done" && w.SessionState == "idle"
		}, "%s's block done, the session idle: %+v", p.name, &w)
		if text, isErr := callTool(t, cs, "run_command", with("command", "echo back"), nil); isErr || !strings.Contains(text, "back") {
			t.Fatalf("run_command after %s quit: %s", p.name, text)
		}
	}
}
