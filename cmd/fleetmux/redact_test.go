package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDevRedaction: with a redact pattern set by `fleetmux policy set`, a fake key
// printed whole and in two writes split inside it comes back redacted from `run`,
// `logs` and `screen`.
func TestDevRedaction(t *testing.T) {
	addr := startDev(t)
	const key = "AKIAIOSFODNN7EXAMPLE"
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "version: 1\nredact:\n  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := runArgs(t, "policy", "set", "--addr", addr, file); err != nil || !strings.Contains(out, "1 redact patterns") {
		t.Fatalf("policy set: %q %q %v", out, errs, err)
	}
	if _, _, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	// The node applies the policy within a second: poll with that deadline.
	deadline := time.Now().Add(time.Second)
	var out string
	for {
		var err error
		out, _, err = runArgs(t, "run", "--addr", addr, "here/s1", "--", "echo "+key)
		if err != nil {
			t.Fatal(err)
		}
		if out != key+"\n" || time.Now().After(deadline) {
			break
		}
	}
	if out != "[REDACTED:aws-key]\n" {
		t.Fatalf("run: %q", out)
	}
	out, _, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", "printf 'AKIAABCD'; printf 'EFGHIJKLMNOP\\n'")
	if err != nil || out != "[REDACTED:aws-key]\n" {
		t.Fatalf("run, key split in two writes: %q %v", out, err)
	}
	for _, verb := range []string{"logs", "screen"} {
		out, _, err := runArgs(t, verb, "--addr", addr, "here/s1")
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if strings.Contains(out, key) || strings.Contains(out, "AKIAABCDEFGH") || strings.Count(out, "[REDACTED:aws-key]") < 3 {
			t.Errorf("%s: %q", verb, out)
		}
	}
}
