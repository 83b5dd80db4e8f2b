// Package browser runs the console's browser test (testdata/browser.mjs of
// package console) in Debian's chromium, driven by playwright-core (npm, pinned;
// .ci/run installs both), against a fleet a test started: the in-process stack
// (package console's TestBrowser) or a real `fleetmux dev` (cmd/fleetmux's
// TestBrowserDev).
package browser

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

const (
	chromium = "/usr/bin/chromium"
	// PlaywrightVersion is the playwright-core .ci/run installs.
	PlaywrightVersion = "1.65.1"
)

// playwright finds the playwright-core package: $FLEETMUX_PLAYWRIGHT, else
// where .ci/run installs it.
func playwright() string {
	if p := os.Getenv("FLEETMUX_PLAYWRIGHT"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "fleetmux", "npm", "playwright-core-"+PlaywrightVersion, "node_modules", "playwright-core")
}

// Need returns playwright-core's directory, or skips the test (fails it
// in CI or under FLEETMUX_TEST_STRICT) when chromium, node or playwright-core is
// missing.
func Need(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		msg := what + " is missing: the console's browser tests need Debian's chromium (apt-get install chromium), node, " +
			"and playwright-core " + PlaywrightVersion + " (npm install --prefix ~/.cache/fleetmux/npm/playwright-core-" + PlaywrightVersion +
			" playwright-core@" + PlaywrightVersion + ", or set FLEETMUX_PLAYWRIGHT); .ci/run installs them"
		if os.Getenv("CI") == "true" || os.Getenv("FLEETMUX_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(chromium); err != nil {
		missing(chromium)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node")
	}
	pw := playwright()
	if _, err := os.Stat(filepath.Join(pw, "package.json")); err != nil {
		missing("playwright-core (" + pw + ")")
	}
	return pw
}

// Artifacts is where the screenshots go: $FLEETMUX_ARTIFACTS/console when set,
// else the test's temporary dir.
func Artifacts(t *testing.T) string {
	dir := t.TempDir()
	if a := os.Getenv("FLEETMUX_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// holdPolicy holds commands that mention "needs-ok" for a person's approval.
const holdPolicy = `{"version": 1, "rules": [{"name": "needs-a-human", "match": {"command": "needs-ok"}, "action": "approve"}]}`

// Run (pw: what Need gave, asked before anything changes $HOME) signs in, sets a policy that holds "needs-ok" commands, makes the
// sessions and agents the script uses on node, runs script (the path of
// browser.mjs) and checks that every step passed and every screenshot exists.
func Run(t *testing.T, pw string, f *stack.Stack, node, script string) {
	t.Helper()
	newToken := func(name, role string) string {
		var nt api.NewToken
		f.Must(http.StatusOK, "POST", "/v1/tokens", api.TokenRequest{Name: name, Role: role}, &nt)
		return nt.Secret
	}
	operator, viewer := newToken("operator", api.RoleOperator), newToken("viewer", api.RoleViewer)
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(holdPolicy), nil)

	s := f.NewSession(node)
	var x api.Session
	f.Must(http.StatusCreated, "POST", "/v1/sessions", api.NewSession{Node: node, CreateRequest: api.CreateRequest{
		Title: `<img src=x onerror="window.__xss=1">`, Shell: "bash"}}, &x)
	f.Must(http.StatusOK, "GET", "/v1/sessions/"+node+"/"+x.ID+"/wait?until=idle&timeout_ms=10000", nil, nil)
	f.Run(node, x.ID, `echo '<img src=x onerror=window.__xss=2>' # <script>window.__xss=3</script>`)
	r := f.NewSession(node)
	for _, word := range []string{"one", "two", "three", "four"} {
		f.Run(node, r.ID, "sleep 0.3; echo "+word) // the markers lie apart in time
	}
	// Two agents under the generic driver (a tiny TUI), one the other's child.
	spawn := func(parent string) api.Agent {
		var a api.Agent
		f.Must(http.StatusCreated, "POST", "/v1/agents", api.SpawnRequest{Node: node, Driver: api.DriverGeneric, Parent: parent, Program: "sh",
			Args: []string{"-c", "printf 'READY> '; exec cat"}, Rules: "version 1\nrule prompt ready -- READY>\n"}, &a)
		return a
	}
	agent := spawn("")
	child := spawn(agent.Address())
	// The node applies the policy within a second: wait until it holds.
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, b := f.Do("POST", "/v1/sessions/"+node+"/"+x.ID+"/run", api.RunBody{Command: "true # needs-ok probe", TimeoutMS: 5000})
		return code == http.StatusConflict && strings.Contains(string(b), `"code":"held"`)
	}, "the node to hold commands under the policy")

	dir := Artifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "PLAYWRIGHT="+pw, "BASE="+f.Base, "ADMIN="+f.Token, "OPERATOR="+operator, "VIEWER="+viewer,
		"SESSION="+node+"/"+s.ID, "XSS="+node+"/"+x.ID, "REPLAY="+node+"/"+r.ID,
		"AGENT="+agent.Address(), "CHILD="+child.Address(), "ARTIFACTS="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("browser test in %v; screenshots in %s\n%s", time.Since(start).Round(time.Millisecond), dir, out.String())
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	for _, step := range []string{"signin", "fleet", "sessions", "terminal", "echo", "takeover", "resize", "xss", "approvals", "agents", "replay", "live", "viewer", "signout"} {
		if !strings.Contains(out.String(), "ok "+step) {
			t.Errorf("step %s did not pass", step)
		}
	}
	for _, shot := range []string{"signin", "fleet", "sessions", "session", "approvals", "agents", "replay", "live", "viewer-session"} {
		if st, err := os.Stat(filepath.Join(dir, shot+".png")); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot of %s: %v", shot, err)
		}
	}
}
