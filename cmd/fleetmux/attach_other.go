//go:build !unix

package main

import (
	"github.com/charmbracelet/x/term"
	"github.com/fleetmux/fleetmux/client"
)

// watchResize sends the terminal's size once (no SIGWINCH here).
func watchResize(fd uintptr, conn *client.AttachConn) (stop func()) {
	if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
		_ = conn.Resize(w, h)
	}
	return func() {}
}
