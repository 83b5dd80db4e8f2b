package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestClientVerbExitCodes: one exit-status scheme for the client verbs (0 done, 1
// refused by the controller, 2 bad command line, 255 no answer), run keeping ssh's
// (255 for any failure of fleetmux), and under --json the error is JSON on stderr
// with the API's code.
func TestClientVerbExitCodes(t *testing.T) {
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	const nowhere = "http://127.0.0.1:1"
	for _, c := range []struct {
		args     []string
		code     int
		jsonCode string // under --json ("": the verb has no --json)
	}{
		{[]string{"screen", "here/s1"}, 0, ""},
		{[]string{"kill", "here/s99"}, 1, "not_found"},
		{[]string{"screen", "here/s99"}, 1, "not_found"},
		{[]string{"blocks", "nowhere/s1"}, 1, "not_found"},
		{[]string{"block", "here/s1", "99"}, 1, "not_found"},
		{[]string{"send", "here/s99", "hi"}, 1, "not_found"},
		{[]string{"keys", "here/s99", "Enter"}, 1, "not_found"},
		{[]string{"wait", "here/s99", "--until", "idle"}, 1, "not_found"},
		{[]string{"kill", "bad..name"}, 2, "bad_request"},
		{[]string{"screen", "here/s1", "--bogus"}, 2, "bad_request"},
		{[]string{"ls", "--addr", nowhere}, 255, "unavailable"},
		{[]string{"kill", "here/s1", "--addr", nowhere}, 255, "unavailable"},
		{[]string{"run", "here/s99", "--", "true"}, 255, "not_found"},
		{[]string{"run", "nowhere/s1", "--", "true"}, 255, "not_found"},
		{[]string{"run", "here/s1", "--addr", nowhere, "--", "true"}, 255, "unavailable"},
	} {
		args := c.args
		if !strings.Contains(strings.Join(args, " "), "--addr") {
			args = append([]string{args[0], "--addr", addr}, args[1:]...)
		}
		_, _, err := runArgs(t, args...)
		if got := exitCode(err); got != c.code {
			t.Errorf("%q: exit %d (%v), want %d", args, got, err, c.code)
		}
		if c.jsonCode == "" {
			continue
		}
		_, _, err = runArgs(t, append([]string{args[0], "--json"}, args[1:]...)...)
		var rep bytes.Buffer
		report(&rep, err)
		var e struct {
			Error struct{ Code, Message string }
		}
		if got := exitCode(err); got != c.code {
			t.Errorf("%q --json: exit %d, want %d", args, got, c.code)
		}
		if json.Unmarshal(rep.Bytes(), &e) != nil || e.Error.Code != c.jsonCode || e.Error.Message == "" || strings.Count(rep.String(), "\n") != 1 {
			t.Errorf("%q --json: stderr %q, want one JSON line with code %s", args, rep.String(), c.jsonCode)
		}
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_fleetmux", "zsh": "#compdef fleetmux", "fish": "complete -c fleetmux"} {
		out, errs, err := runArgs(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v %q, want %q in:\n%.300s", shell, err, errs, want, out)
		}
	}
	if _, _, err := runArgs(t, "completion", "powershell"); exitCode(err) != 2 {
		t.Errorf("completion powershell: exit %d, want 2", exitCode(err))
	}
	// Dynamic completion of verbs and flags works through cobra's hidden verb.
	out, _, err := runArgs(t, "__complete", "ru")
	if err != nil || !strings.HasPrefix(out, "run\t") {
		t.Errorf("__complete ru: %v %q", err, out)
	}
}
