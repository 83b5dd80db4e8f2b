package main

import (
	"path/filepath"
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil/browser"
	fleet "github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestBrowserDev: the console's browser test (package browser: sign-in, the
// fleet, a terminal, a viewer that cannot type, approvals, replay, live,
// sign-out) against a real `fleetmux dev`, started as the README starts it,
// with its own admin token.
func TestBrowserDev(t *testing.T) {
	pw := browser.Need(t)
	script, err := filepath.Abs("../../console/testdata/browser.mjs")
	if err != nil {
		t.Fatal(err)
	}
	addr := startDev(t) // changes the working directory
	browser.Run(t, pw, fleet.Remote(t, addr, devAdminToken), "here", script)
}
