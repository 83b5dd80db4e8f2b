package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestSystemdUnits: the units in contrib/systemd pass `systemd-analyze verify`
// with nothing to say (it exits 0 on unknown keys and bad values, and says so:
// any output fails the test), with the binary they name built from this tree.
// A broken copy is checked too, so the check can fail.
func TestSystemdUnits(t *testing.T) {
	analyze := testutil.NeedTool(t, "systemd-analyze")
	units, err := filepath.Glob(filepath.Join("..", "..", "contrib", "systemd", "*.service"))
	if err != nil || len(units) != 3 {
		t.Fatalf("units: %v %v", units, err)
	}
	dir := t.TempDir()
	bin, err := testutil.BuildFleetmux(dir)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(mutate func(string) string) string {
		t.Helper()
		vdir := t.TempDir()
		var paths []string
		for _, u := range units {
			b, err := os.ReadFile(u)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.ReplaceAll(string(b), "/usr/local/bin/fleetmux", bin)
			if mutate != nil {
				text = mutate(text)
			}
			p := filepath.Join(vdir, filepath.Base(u))
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
		if err != nil {
			return string(out) + err.Error()
		}
		return string(out)
	}
	if out := verify(nil); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
	if out := verify(func(s string) string { return strings.Replace(s, "ProtectSystem=strict", "ProtectSystem=sometimes", 1) }); out == "" {
		t.Error("a bad value passed the check")
	}
}
