//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/charmbracelet/x/term"
	"github.com/fleetmux/fleetmux/client"
)

// watchResize sends the terminal's size now and on every SIGWINCH until stop.
func watchResize(fd uintptr, conn *client.AttachConn) (stop func()) {
	send := func() {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			_ = conn.Resize(w, h)
		}
	}
	send()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-ch:
				send()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-finished
	}
}
