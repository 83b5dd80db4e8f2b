package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestReadmeNatsCommand: the README's nats CLI command, expanded by sh in the
// directory where `fleetmux dev` runs (its data dir for .fleetmux), names dev's
// server (--server), its subscriber credentials (--creds) and the CA (--tlsca),
// and a client connected with exactly those (nats.go: the nats CLI is not
// installed here) reads a session's output on the subject it subscribes to.
// Without --server the nats CLI dials nats://127.0.0.1:4222, which is not dev's.
func TestReadmeNatsCommand(t *testing.T) {
	sh := testutil.NeedTool(t, "sh")
	m := regexp.MustCompile("(?s)```sh\n(nats .*?)\n```").FindStringSubmatch(readDoc(t, "README.md"))
	if m == nil {
		t.Fatal("README.md has no ```sh block with a nats command")
	}
	addr := startDev(t)
	// The README's dev runs with its default data dir, .fleetmux; startDev's is data.
	cmdline := strings.ReplaceAll(strings.ReplaceAll(m[1], "\\\n", " "), ".fleetmux/", "data/")
	// sh expands the command; printf gives its words, one a line.
	out, err := exec.Command(sh, "-c", "set -e; printf '%s\\n' "+strings.TrimPrefix(cmdline, "nats ")).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", cmdline, err)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	flags := map[string]string{}
	var subject string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case strings.HasPrefix(a, "--") && i+1 < len(args):
			flags[a] = args[i+1]
			i++
		case a == "sub" && i+1 < len(args):
			subject = args[i+1]
			i++
		default:
			t.Fatalf("the README's nats command has %q, which this test does not know: %q", a, args)
		}
	}
	if flags["--server"] == "" || flags["--creds"] == "" || flags["--tlsca"] == "" || subject == "" {
		t.Fatalf("the README's nats command needs --server, --creds, --tlsca and sub SUBJECT: %q", args)
	}
	nc, err := nats.Connect(flags["--server"], nats.UserCredentials(flags["--creds"]), nats.RootCAs(flags["--tlsca"]))
	if err != nil {
		t.Fatalf("connect as the README's nats command does: %v", err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var got []byte
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { mu.Lock(); got = append(got, m.Data...); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	if out, errs, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", "echo readme-$((6*7))"); err != nil {
		t.Fatalf("run: %q %q %v", out, errs, err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Contains(got, []byte("readme-42"))
	}, "the README's subscription to see the output")
}
