package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// detachKey is Ctrl-] (as in telnet): it detaches from the session.
const detachKey = 0x1d

// screenReset undoes what a program in the session may have left set in the
// terminal: the alternate screen, a hidden cursor, colours and attributes,
// bracketed paste, mouse reporting, application cursor keys and keypad, a
// scrolling region. attach writes it when it leaves a terminal.
const screenReset = "\x1b[?1049l\x1b[?47l\x1b[r\x1b[0m\x1b[?25h\x1b[?2004l" +
	"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1l\x1b>"

type attachOptions struct {
	clientOptions
	from int64
}

func attachCmd() *cobra.Command {
	var o attachOptions
	c := &cobra.Command{
		Use:   "attach NODE/ID [--from OFFSET]",
		Short: "Attach this terminal to a session (detach with Ctrl-])",
		Long: "attach connects your terminal to the session: you see its screen and what you\n" +
			"type goes to it, until you detach with Ctrl-] or the session exits (attach then\n" +
			"exits with the session's exit code). Resizing your terminal resizes the session.\n\n" +
			"Without --from it starts with the screen-ful of recent output; --from OFFSET\n" +
			"replays the output from that byte offset first.\n\n" +
			"When stdin is not a terminal the bytes are passed through as they come (no raw\n" +
			"mode, no detach key); the end of stdin does not detach: interrupt to stop.",
		Example: "  fleetmux attach web-1/s3\n  printf 'ls\\n' | fleetmux attach web-1/s3",
		Args:    exactArgs("attach", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("attach", args)
			if err != nil {
				return err
			}
			var from *int64
			if c.Flags().Changed("from") {
				if o.from < 0 {
					return usageError("attach: --from %d: offsets are not negative", o.from)
				}
				from = &o.from
			}
			cl, err := o.client()
			if err != nil {
				return err
			}
			return o.fail(attachSession(c.Context(), cl, node, id, from, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr()))
		},
	}
	o.register(c, false)
	c.Flags().Int64Var(&o.from, "from", 0, "start the output at this byte offset")
	return c
}

// terminalFd is in's file descriptor when in is a terminal.
func terminalFd(in io.Reader) (uintptr, bool) {
	f, ok := in.(*os.File)
	if !ok {
		return 0, false
	}
	fd := f.Fd()
	return fd, term.IsTerminal(fd)
}

// attachSession copies in to the session and its output to out until the session
// exits, the user detaches (Ctrl-], in a terminal) or ctx ends. A terminal in is put
// in raw mode and restored before attachSession returns.
func attachSession(ctx context.Context, cl *client.Client, node, id string, from *int64, in io.Reader, out, errw io.Writer) error {
	addr := node + "/" + id
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := cl.Attach(ctx, node, id, client.AttachOptions{From: from})
	if err != nil {
		return err
	}
	defer conn.Close()

	fd, tty := terminalFd(in)
	restore := func() {}
	if tty {
		fmt.Fprintf(errw, "[attached to %s: detach with Ctrl-]]\n", addr)
		state, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("attach: putting the terminal in raw mode: %w", err)
		}
		var once sync.Once
		restore = func() { once.Do(func() { _ = term.Restore(fd, state) }) }
		defer restore()
		stopResizes := watchResize(fd, conn)
		defer stopResizes()
	}

	detached := make(chan struct{})
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		copyInput(conn, in, tty, detached)
	}()
	outDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, conn)
		outDone <- err
	}()

	var outErr error
	ended, wasDetached := false, false
	select {
	case outErr = <-outDone:
		ended = true
	case <-detached:
		wasDetached = true
	case <-ctx.Done():
		wasDetached = true
	}
	conn.Close()
	if !ended {
		<-outDone
	}
	restore()
	// The input goroutine is blocked reading in: unblock it where in allows.
	if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
		<-inDone
	}

	nl := ""
	if tty {
		_, _ = io.WriteString(out, screenReset) // the user's screen back as it was
		nl = "\n"                               // the cursor may be anywhere on the line
	}
	if code := conn.ExitCode(); code != nil {
		fmt.Fprintf(errw, "%s[session %s exited with code %d]\n", nl, addr, *code)
		switch {
		case *code == 0:
			return nil
		case *code < 0 || *code > 255:
			return &exitError{code: 1}
		}
		return &exitError{code: *code}
	}
	if wasDetached {
		fmt.Fprintf(errw, "%s[detached from %s]\n", nl, addr)
		return nil
	}
	fmt.Fprint(errw, nl)
	if outErr != nil && !errors.Is(outErr, context.Canceled) {
		return outErr
	}
	return fmt.Errorf("attach: the controller closed the connection to %s", addr)
}

// copyInput copies in to the session until in ends, a write fails or, in a
// terminal, the detach key is typed (it closes detached; the key itself is not sent).
func copyInput(conn *client.AttachConn, in io.Reader, tty bool, detached chan<- struct{}) {
	buf := make([]byte, 4096)
	for {
		n, err := in.Read(buf)
		p := buf[:n]
		if tty {
			if i := bytes.IndexByte(p, detachKey); i >= 0 {
				if i > 0 {
					_, _ = conn.Write(p[:i])
				}
				close(detached)
				return
			}
		}
		if len(p) > 0 {
			if _, werr := conn.Write(p); werr != nil {
				return
			}
		}
		if err != nil {
			return // end of stdin: the output keeps flowing
		}
	}
}
