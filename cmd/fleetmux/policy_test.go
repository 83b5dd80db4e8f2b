package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDevPolicy: the guardrail policy through the CLI on a real `fleetmux dev`,
// whose node reads FLEETMUX_POLICY with its own NATS identity: the banner says
// none is set; `policy set FILE` puts one in force, `policy show` prints it, a
// denied `run` exits 255 naming the rule and runs nothing; a bad document from
// stdin is refused with its line and field; `policy rm` allows again.
func TestDevPolicy(t *testing.T) {
	addr := startDev(t)
	if !strings.Contains(devOut, "policy    none: every command is allowed (set one: fleetmux policy set FILE)") {
		t.Errorf("the banner does not say no policy is set:\n%s", devOut)
	}
	dir := t.TempDir()
	doc := "version: 1\nrules:\n  - name: no-markers\n    match: {command: 'touch\\s+\\S*marker'}\n    action: deny\n"
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := runArgs(t, "policy", "show", "--addr", addr); err != nil || out != "" || !strings.Contains(errs, "no policy is set") {
		t.Fatalf("policy show before set: %q %q %v", out, errs, err)
	}
	out, errs, err := runArgs(t, "policy", "set", "--addr", addr, file)
	if err != nil || !strings.HasPrefix(out, "policy version ") || !strings.Contains(out, "(1 rules, 0 redact patterns)") {
		t.Fatalf("policy set: %q %q %v", out, errs, err)
	}
	if out, errs, err := runArgs(t, "policy", "show", "--addr", addr); err != nil || out != doc || !strings.Contains(errs, "# policy version ") {
		t.Fatalf("policy show: %q %q %v", out, errs, err)
	}
	if _, _, err := runArgs(t, "new", "--addr", addr, "--cwd", dir); err != nil {
		t.Fatal(err)
	}
	// The node applies it within a second: poll with that deadline.
	deadline := time.Now().Add(time.Second)
	for {
		_, _, err = runArgs(t, "run", "--addr", addr, "here/s1", "--", "touch marker")
		if err != nil || time.Now().After(deadline) {
			break
		}
		os.Remove(filepath.Join(dir, "marker"))
	}
	if exitCode(err) != 255 || err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), "no-markers") {
		t.Fatalf("a denied run: %v (exit %d), want 255 naming rule no-markers", err, exitCode(err))
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); err == nil {
		t.Fatal("the denied command ran")
	}

	var stdout, stderr bytes.Buffer
	err = runIO(context.Background(), []string{"policy", "set", "--addr", addr, "-"}, strings.NewReader("version: 1\nrules:\n  - name: x\n    action: explode\n"), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "line 4: rules[0].action") {
		t.Fatalf("a bad policy from stdin: %v %q", err, stdout.String())
	}
	if out, _, err := runArgs(t, "policy", "show", "--addr", addr); err != nil || out != doc {
		t.Fatalf("the refused policy replaced the one in force: %q %v", out, err)
	}

	if out, _, err := runArgs(t, "policy", "rm", "--addr", addr); err != nil || !strings.Contains(out, "removed") {
		t.Fatalf("policy rm: %q %v", out, err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, _, err = runArgs(t, "run", "--addr", addr, "here/s1", "--", "touch marker")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("run after policy rm: %v", err)
	}
}
