package console_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil/browser"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestBrowser: the console in a real browser (package browser) against the
// real stack (embedded NATS, a node with real shells, the controller's HTTP API
// serving the console); cmd/fleetmux's TestBrowserDev runs it against `fleetmux dev`.
func TestBrowser(t *testing.T) {
	pw := browser.Need(t)
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": {"role": "web"}}, Store: true, Policy: true})
	browser.Run(t, pw, f, "n1", "testdata/browser.mjs")
}

// TestPlaywrightPinned: .ci/run installs the playwright-core this test looks for.
func TestPlaywrightPinned(t *testing.T) {
	run, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(run), "\nplaywright_version="+browser.PlaywrightVersion+"\n") {
		t.Errorf(".ci/run does not install playwright-core %s", browser.PlaywrightVersion)
	}
}
