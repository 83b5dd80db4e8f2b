package holder

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestSlowAgentGetsTheLastOutput (from the second review): an attached agent that
// reads slower than the program writes holds the holder's read loop in waitRoom;
// the program writes its last output, which the PTY buffers, and exits. The exit's
// drain (drainAfterExit) used to run out meanwhile: the exit was sent before the
// program's last bytes, which were silently lost. The drain is for a background
// job that keeps the terminal open, not for a read loop that waits for its agent.
func TestSlowAgentGetsTheLastOutput(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ring = 64 << 10
	const n = 2 << 20
	info, master, err := c.Spawn(ctx, Spawn{ID: "s1", Argv: []string{"/bin/sh", "-c", fmt.Sprintf("stty -onlcr; head -c %d /dev/zero | tr '\\0' a; printf %%s \"$(head -c 3000 /dev/zero | tr '\\0' b)\"; echo END; exit 7", n)}, Dir: "/",
		Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb"}, Cols: 80, Rows: 24, Ring: ring})
	if err != nil {
		t.Fatal(err)
	}
	master.Close()
	st, err := c.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Master.Close()
	var out []byte
	off := st.From
	var code *int
	msgs := 0
	stalled := false
	for {
		ch, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended after %d bytes: %v", len(out), err)
		}
		if ch.Exited {
			code = ch.Code
			break
		}
		if ch.Off != off {
			t.Fatalf("gap at %d..%d", off, ch.Off)
		}
		out = append(out, ch.Data...)
		off += int64(len(ch.Data))
		msgs++
		if len(out) > n-600<<10 && !stalled {
			time.Sleep(50 * time.Millisecond) // the agent falls behind near the end
			if st := procState(info.PID); st == 'Z' || st == 0 {
				stalled = true // the program exited: the agent pauses (a GC, the CPU busy), as agents do
				time.Sleep(time.Second)
			}
		}
	}
	want := append(append(bytes.Repeat([]byte("a"), n), bytes.Repeat([]byte("b"), 3000)...), "END\n"...)
	t.Logf("got %d bytes (%d messages) of %d before the exit (exit 7: %v)", len(out), msgs, len(want), code != nil && *code == 7)
	if !bytes.Equal(out, want) {
		t.Fatalf("the exit came after %d bytes of the program's %d: its last %d bytes are lost (tail %q)", len(out), len(want), len(want)-len(out), out[max(0, len(out)-20):])
	}
}
