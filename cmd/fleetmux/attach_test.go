package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestAttachNamesDetachKeyAndRestoresScreen: attach in a terminal says on stderr
// how to detach, and on detach leaves the terminal as it found it (out of the
// alternate screen a full-screen program put it in, cursor shown, attributes reset).
func TestAttachNamesDetachKeyAndRestoresScreen(t *testing.T) {
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptm.Close()
	defer tty.Close()
	cl, err := client.New(client.Config{Addr: addr, Token: devAdminToken})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- attachSession(context.Background(), cl, "here", "s1", nil, tty, &out, &errb)
	}()
	testutil.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(errb.String(), "[attached to here/s1: detach with Ctrl-]]")
	}, "attach to name the detach key")
	// A program switches to the alternate screen and hides the cursor.
	if _, err := ptm.Write([]byte("printf '\\033[?1049h\\033[?25lfull-screen-%s' now\r")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return strings.Contains(out.String(), "full-screen-now") }, "the program's output")
	if _, err := ptm.Write([]byte{detachKey}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("attach did not detach on Ctrl-]")
	}
	o := out.String()
	if !strings.HasSuffix(o, screenReset) || strings.LastIndex(o, "\x1b[?1049l") < strings.LastIndex(o, "\x1b[?1049h") {
		t.Errorf("the screen was not restored on detach: output ends %q", o[max(0, len(o)-120):])
	}
	if !strings.Contains(errb.String(), "[detached from here/s1]") {
		t.Errorf("stderr %q", errb.String())
	}
}
