package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// attach connects the SSH channel to a session: the current screen, then live
// output; keystrokes to the session (operators and admins; a viewer's are refused
// with a notice); window changes resize it. Ctrl-] or closing the connection
// detaches and leaves the session running. Several clients may attach at once;
// each reads output on its own, so a slow one holds up nobody.
func (sc *sshSession) attach(ctx context.Context, node, id string) int {
	c := sc.s.fleet
	errw := sc.errOut()
	if err := api.ValidName(node); err != nil {
		fmt.Fprintf(errw, "fleetmux: %v\n", err)
		return 2
	}
	if err := api.ValidName(id); err != nil {
		fmt.Fprintf(errw, "fleetmux: %v\n", err)
		return 2
	}
	if _, err := c.Session(ctx, node, id); err != nil {
		fmt.Fprintf(errw, "fleetmux: %v\n", userError(err))
		return 1
	}
	addr := node + "/" + id
	writer := api.RoleAtLeast(sc.id.role, api.RoleOperator)
	sc.audit("attach", addr, "ok", "")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	sc.mu.Lock()
	pty, cols, rows := sc.pty, sc.cols, sc.rows
	if writer {
		sc.resize = func(cols, rows int) {
			if _, err := c.Resize(ctx, node, id, cols, rows); err != nil {
				sc.s.log.Debug("ssh resize", "session", addr, "err", err)
			}
		}
	}
	sc.mu.Unlock()
	if writer && pty && cols > 0 && rows > 0 {
		c.Resize(ctx, node, id, cols, rows)
	}

	type ended struct {
		code   int
		detach bool
	}
	done := make(chan ended, 2)
	in := sc.input()
	var lost <-chan api.Writer
	if writer {
		var stop func()
		lost, stop = sc.watchLease(node, id)
		defer stop()
	}
	inputDone := make(chan struct{})
	go func() { // input: ends at a detach, the end of input, or when attach returns
		defer close(inputDone)
		warned := false
		lw := leaseWriter{sc: sc, node: node, id: id}
		for {
			var p []byte
			var ok bool
			select {
			case p, ok = <-in:
			case w := <-lost:
				lw.lost(w)
				continue
			case <-ctx.Done():
				return
			}
			if !ok {
				done <- ended{detach: true}
				return
			}
			if i := bytes.IndexByte(p, detachKey); i >= 0 {
				if writer && i > 0 {
					lw.input(ctx, p[:i])
				}
				done <- ended{detach: true}
				return
			}
			if !writer {
				if !warned {
					fmt.Fprintf(sc.ch, "\r\n[fleetmux: read-only (%s role): keystrokes are not sent; Ctrl-] detaches]\r\n", sc.id.role)
					warned = true
				}
				continue
			}
			lw.input(ctx, p)
		}
	}()
	defer func() { <-inputDone }()
	defer sc.watchNotices(ctx, node, id, sc.ch)() // stops with ctx (cancelled below)
	outputDone := make(chan struct{})
	go func() { // output: ends with the session, an error, or when attach returns
		defer close(outputDone)
		start, err := c.Redraw(ctx, node, id, sc.ch)
		if err != nil {
			done <- ended{code: 1}
			return
		}
		exitCode, exited, err := c.Follow(ctx, node, id, start, sc.ch)
		switch {
		case err == nil && exited:
			code := 0
			if exitCode != nil {
				code = *exitCode
			}
			fmt.Fprintf(sc.ch, "\r\n[fleetmux: session %s exited (%d)]\r\n", addr, code)
			done <- ended{code: code}
		case ctx.Err() != nil:
			done <- ended{detach: true}
		default:
			fmt.Fprintf(sc.ch, "\r\n[fleetmux: %v]\r\n", userError(err))
			done <- ended{code: 1}
		}
	}()
	e := <-done
	cancel()
	<-outputDone
	sc.mu.Lock()
	sc.resize = nil
	sc.mu.Unlock()
	if e.detach {
		fmt.Fprintf(sc.ch, "\r\n[detached from %s]\r\n", addr)
		sc.audit("detach", addr, "ok", "")
		return 0
	}
	sc.audit("detach", addr, "session ended", "")
	return e.code
}

// userError is what an SSH user sees of an error.
func userError(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code + ": " + ae.Message
	}
	return "internal error (details in the controller's log)"
}

// menu lists the sessions and attaches to the one chosen (a shell with a PTY and
// no command).
func (sc *sshSession) menu(ctx context.Context) int {
	c := sc.s.fleet
	w := sc.ch // raw terminal: write \r\n ourselves
	for {
		list, err := c.Sessions(ctx, api.SessionFilter{})
		if err != nil {
			fmt.Fprintf(w, "fleetmux: %s\r\n", userError(err))
			return 1
		}
		fmt.Fprintf(w, "\r\nfleetmux sessions (%d):\r\n", len(list.Sessions))
		for i, s := range list.Sessions {
			what := s.CurrentCommand
			if what == "" && s.LastExitCode != nil {
				what = "last exit " + strconv.Itoa(*s.LastExitCode)
			}
			fmt.Fprintf(w, "  %2d) %-20s %-13s %-20s %s\r\n", i+1, api.Printable(s.Node+"/"+s.ID), trunc(s.State, 13), trunc(s.Title, 20), trunc(what, 30))
		}
		if len(list.Unavailable) > 0 {
			fmt.Fprintf(w, "  (not answering: %s)\r\n", strings.Join(list.Unavailable, ", "))
		}
		fmt.Fprint(w, "attach to [number], r to refresh, q to quit: ")
		line, err := readLine(sc.input(), w)
		if err != nil {
			return 0
		}
		switch line = strings.TrimSpace(line); line {
		case "q", "quit", "exit":
			return 0
		case "r", "":
			continue
		}
		n, err := strconv.Atoi(line)
		if err != nil || n < 1 || n > len(list.Sessions) {
			fmt.Fprintf(w, "no session %q\r\n", line)
			continue
		}
		s := list.Sessions[n-1]
		code := sc.attach(ctx, s.Node, s.ID)
		if code != 0 || ctx.Err() != nil {
			return code
		}
	}
}

// trunc makes s safe to print (api.Printable) and cuts it to n runes, marking a
// cut with "…".
func trunc(s string, n int) string {
	s = api.Printable(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// readLine reads a line typed in a raw terminal, echoing it (backspace edits;
// Ctrl-C and Ctrl-D end it with io.EOF).
func readLine(in <-chan []byte, w io.Writer) (string, error) {
	var line []byte
	for {
		p, ok := <-in
		if !ok {
			return "", io.EOF
		}
		for _, b := range p {
			switch b {
			case '\r', '\n':
				w.Write([]byte("\r\n"))
				return string(line), nil
			case 3, 4:
				w.Write([]byte("\r\n"))
				return "", io.EOF
			case 127, 8:
				if len(line) > 0 {
					line = line[:len(line)-1]
					w.Write([]byte("\b \b"))
				}
			default:
				if b >= 0x20 && len(line) < 256 {
					line = append(line, b)
					w.Write([]byte{b})
				}
			}
		}
	}
}
