package node_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestGuardRunWhileIntegrationLost: the session's marks say its integration is
// lost (here: zsh's hooks that report a command's end were removed; under load a
// mark the session took for lost does the same until the next prompt hook), but
// the shell's guard still asks about every line. A run's line, decided before it
// was typed, is the run's: the shell's question about it is answered allow, not
// refused as no writer's (on the old code the node expected the line only while
// the integration was "ok", and the run was denied by rule writer-unknown). A line
// nobody typed is still refused: a program in the session that types into its
// terminal gets writer-unknown.
func TestGuardRunWhileIntegrationLost(t *testing.T) {
	testutil.NeedTool(t, "zsh")
	f, _ := guardFixture(t, markerPolicy, 4)
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "zsh", Cwd: dir})
	r := f.run(s.ID, "unfunction precmd preexec; precmd_functions=(); preexec_functions=()")
	if r.Session.Integration != api.IntegrationLost {
		t.Fatalf("integration %q after the hooks were removed, want %q (the test's premise)", r.Session.Integration, api.IntegrationLost)
	}
	screen := func() string {
		var sc api.Screen
		if f.call("screen", api.SessionRequest{Session: s.ID}, &sc) != nil {
			return ""
		}
		return sc.Text
	}
	// The block of a run has no end now (no hook reports it): the file says it ran.
	ran := filepath.Join(dir, "ran")
	if err := f.call("run", api.RunRequest{Session: s.ID, Command: "touch " + ran, TimeoutMS: 500}, nil); err != nil {
		t.Fatalf("run: %v", err)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return fileThere(ran) || strings.Contains(screen(), "writer-unknown")
	}, "the run's line to be decided by the shell's check")
	if !fileThere(ran) {
		t.Fatalf("the run's own line was refused by the shell's check:\n%s", screen())
	}

	if _, err := exec.LookPath("python3"); err != nil {
		t.Log("no python3: the planted line is not tried")
		return
	}
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Geteuid() != 0 {
		t.Log("TIOCSTI is off: the planted line is not tried")
		return
	}
	script, goFile, planted := filepath.Join(dir, "inj.py"), filepath.Join(dir, "go"), filepath.Join(dir, "planted")
	if err := os.WriteFile(script, []byte(injector), 0o600); err != nil {
		t.Fatal(err)
	}
	// Typed (the block before has no end either): the program waits for the file,
	// then types "touch PLANTED" into its terminal.
	if err := f.call("input", api.InputRequest{Session: s.ID, Data: "python3 " + script + " " + goFile + " " + planted + " & echo > " + goFile + "\r"}, nil); err != nil {
		t.Fatalf("input: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		return fileThere(planted) || strings.Contains(screen(), "writer-unknown")
	}, "the planted line to be decided by the shell's check")
	if sc := screen(); fileThere(planted) || !fileThere(goFile) || !strings.Contains(sc, "touch "+planted) {
		t.Fatalf("want the typed line run and the planted one refused (planted file there: %v):\n%s", fileThere(planted), sc)
	}
}
