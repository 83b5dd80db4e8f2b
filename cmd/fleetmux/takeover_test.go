package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestHolderStreamTakeover is the attack of issue 25 #9: a process with the
// holder's uid attached to a session through the holder's socket; the agent took
// the end of its stream for the holder's, marked the session exited, and the shell
// ran on, out of every agent's reach. Now an attach that does not name the live
// stream's epoch is refused, and when a process takes the stream by naming it, the
// agent asks the holder, takes its stream back and logs who took it: the session
// stays running and reachable.
func TestHolderStreamTakeover(t *testing.T) {
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	if out, _, err := runArgs(t, "run", "here/s1", "--addr", addr, "--", "echo before-$((6*7))"); err != nil || !strings.Contains(out, "before-42") {
		t.Fatalf("run before: %q %v", out, err)
	}
	data, err := filepath.Abs("data") // startDev's --data, in its cwd
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rogue, err := holder.Dial(ctx, holderDir(data))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()

	// A plain attach, as the attack made it: refused, the agent's stream is live.
	if st, err := rogue.Attach(ctx, "s1", 0, 0); !errors.Is(err, holder.ErrStale) {
		if err == nil {
			st.Close()
			st.Master.Close()
		}
		t.Fatalf("an attach beside the agent's: %v, want ErrStale", err)
	}
	// One that names the live stream's epoch takes it.
	list, err := rogue.List(ctx)
	if err != nil || len(list) != 1 || list[0].StreamPID != os.Getpid() {
		t.Fatalf("list: %+v %v (the agent is pid %d)", list, err, os.Getpid())
	}
	st, err := rogue.Attach(ctx, "s1", 0, list[0].Epoch)
	if err != nil {
		t.Fatal(err)
	}
	st.Master.Close()
	if st.Kept != nil {
		st.Kept.Close()
	}
	defer st.Close()
	// The agent takes it back: the rogue's stream ends.
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the agent did not take its stream back")
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		l, err := rogue.List(ctx)
		return err == nil && len(l) == 1 && l[0].StreamPID == os.Getpid() && l[0].Epoch == list[0].Epoch+2
	}, "the agent to hold the stream again")

	// The session is reachable, running, and its output whole.
	out, _, err := runArgs(t, "run", "here/s1", "--addr", addr, "--", "echo after-$((6*7))")
	if err != nil || !strings.Contains(out, "after-42") {
		t.Fatalf("run after the takeover: %q %v", out, err)
	}
	out, _, err = runArgs(t, "ls", "--json", "--addr", addr)
	if err != nil || !strings.Contains(out, `"s1"`) || strings.Contains(out, "exited") {
		t.Fatalf("ls after the takeover: %q %v", out, err)
	}
	out, _, err = runArgs(t, "logs", "here/s1", "--addr", addr)
	if err != nil || strings.Count(out, "before-42") != 1 || strings.Count(out, "after-42") != 1 {
		t.Fatalf("logs after the takeover (each output once): %q %v", out, err)
	}
}
