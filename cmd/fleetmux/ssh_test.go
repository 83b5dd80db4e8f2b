package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestOpenSSH drives the SSH front door of `fleetmux dev` with the real OpenSSH
// client: verbs print and exit as the CLI does.
func TestOpenSSH(t *testing.T) {
	sshBin := testutil.NeedTool(t, "ssh")
	keygen := testutil.NeedTool(t, "ssh-keygen")
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "tester", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	adminKey := filepath.Join(dir, "admin_ed25519")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "boss", "-f", adminKey)
	adminPub, err := os.ReadFile(adminKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, append(append([]byte("role=operator "), pub...), append([]byte("role=admin "), adminPub...)...), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	sshAs := func(key string, args ...string) (string, string, int) {
		t.Helper()
		full := append([]string{"-p", m[1], "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-F", "/dev/null", "127.0.0.1"}, args...)
		cmd := exec.Command(sshBin, full...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	ssh := func(args ...string) (string, string, int) { t.Helper(); return sshAs(key, args...) }
	out, errs, code := ssh("new")
	if code != 0 || out != "here/s1\n" {
		t.Fatalf("ssh new: %q %q %d", out, errs, code)
	}
	out, errs, code = ssh("run", "here/s1", "--", `'echo hi; (exit 3)'`)
	if code != 3 || out != "hi\n" {
		t.Fatalf("ssh run: %q %q exit %d, want hi and 3", out, errs, code)
	}
	// run exits as it does in a terminal: the command's code, else 255 for a failure
	// of fleetmux itself (here: an unknown node, a refused flag).
	if _, errs, code := ssh("run", "nowhere/s1", "--", "true"); code != 255 || !strings.Contains(errs, "not_found") {
		t.Fatalf("ssh run on an unknown node: %q exit %d, want 255", errs, code)
	}
	if _, errs, code := ssh("run", "--addr=http://x", "here/s1", "--", "true"); code != 255 {
		t.Fatalf("ssh run --addr: %q exit %d, want 255", errs, code)
	}
	out, _, code = ssh("ls")
	if code != 0 || !strings.Contains(out, "here/s1") {
		t.Fatalf("ssh ls: %q %d", out, code)
	}
	// An operator may not kill a session another key created (the node names its
	// owner; it kills its own below); a server verb is not a command here.
	if out, errs, code := sshAs(adminKey, "new"); code != 0 || out != "here/s2\n" {
		t.Fatalf("ssh new as admin: %q %q %d", out, errs, code)
	}
	if _, errs, code := ssh("kill", "here/s2"); code != 1 || !strings.Contains(errs, "belongs to ssh:") {
		t.Fatalf("ssh kill of the admin's session as operator: %q %d", errs, code)
	}
	if _, _, code := ssh("try", "--", "id"); code != 2 {
		t.Fatalf("ssh try: exit %d, want 2", code)
	}

	// Every verb over ssh prints and exits exactly as the CLI does in a terminal.
	cli := func(args ...string) (string, int) {
		t.Helper()
		out, _, err := runArgs(t, append([]string{args[0], "--addr", addr}, args[1:]...)...)
		return out, exitCode(err)
	}
	for _, verb := range [][]string{
		{"nodes"}, {"ls"}, {"screen", "here/s1"}, {"blocks", "here/s1"}, {"block", "here/s1", "1"},
		{"block", "here/s1", "99"}, {"logs", "here/s1"}, {"wait", "here/s1", "--until", "idle"},
		{"screen", "here/s9"}, {"nodes", "--json"},
	} {
		want, wantCode := cli(verb...)
		if bad := verb[len(verb)-1] == "99" || verb[len(verb)-1] == "here/s9"; bad == (wantCode == 0) || !bad && want == "" {
			t.Errorf("the CLI itself: %v exit %d %q", verb, wantCode, want)
		}
		got, errs, code := ssh(verb...)
		if got != want || code != wantCode {
			t.Errorf("ssh %v: exit %d %q (stderr %q); the CLI: exit %d %q", verb, code, got, errs, wantCode, want)
		}
	}
	if out, errs, code := ssh("send", "here/s1", "--", "echo typed-$((6*7))"); code != 0 {
		t.Fatalf("ssh send: %q %q %d", out, errs, code)
	}
	if out, errs, code := ssh("keys", "here/s1", "Enter"); code != 0 {
		t.Fatalf("ssh keys: %q %q %d", out, errs, code)
	}
	if out, errs, code := ssh("wait", "here/s1", "--until", "idle"); code != 0 {
		t.Fatalf("ssh wait: %q %q %d", out, errs, code)
	}
	if out, _, _ := ssh("logs", "here/s1"); !strings.Contains(out, "typed-42") {
		t.Fatalf("ssh logs after send and keys: %q", out)
	}
	if out, errs, code := ssh("kill", "here/s1"); code != 0 {
		t.Fatalf("ssh kill of its own session as operator: %q %q %d", out, errs, code)
	}
	if _, code := cli("screen", "here/s1"); code == 0 {
		t.Fatalf("here/s1 still answers after ssh kill")
	}
	if out, errs, code := sshAs(adminKey, "kill", "here/s2"); code != 0 {
		t.Fatalf("ssh kill as admin: %q %q %d", out, errs, code)
	}
}

// secretEnv sets every secret the fleetmux processes read from their environment
// to a canary value and returns the canaries.
func secretEnv(t *testing.T) []string {
	t.Helper()
	var canaries []string
	for _, name := range []string{api.EnvToken, api.EnvGossipKey, api.EnvNATSCreds, "FLEETMUX_NATS_TOKEN"} {
		v := "canary-" + strings.ToLower(name) + "-5ec2e7"
		t.Setenv(name, v)
		canaries = append(canaries, v)
	}
	return canaries
}

// TestNoSecretInFlagDefaults walks every flag of every command: none takes its
// default from a secret in the environment (cobra prints defaults in help).
func TestNoSecretInFlagDefaults(t *testing.T) {
	canaries := secretEnv(t)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, s := range canaries {
				if strings.Contains(f.DefValue, s) {
					t.Errorf("%s --%s has a secret as its default", c.CommandPath(), f.Name)
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cliRoot())
}

// TestSSHShowsNoSecrets is the attack of issue 15 #1: an SSH viewer asks for help
// and must see neither the controller's secrets (FLEETMUX_TOKEN in its
// environment) nor the server verbs, whose flags belong to the controller.
func TestSSHShowsNoSecrets(t *testing.T) {
	canaries := secretEnv(t)
	sshBin := testutil.NeedTool(t, "ssh")
	keygen := testutil.NeedTool(t, "ssh-keygen")
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "viewer", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, append([]byte("role=viewer "), pub...), 0o600); err != nil {
		t.Fatal(err)
	}
	startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	ssh := func(args ...string) (string, int) {
		t.Helper()
		full := append([]string{"-p", m[1], "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-F", "/dev/null", "127.0.0.1"}, args...)
		out, err := exec.Command(sshBin, full...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	probes := [][]string{{"help"}, {"--help"}, {"ls", "--help"}, {"help", "ls"}, {"nodes", "-h"}, {"run", "--help"},
		{"new", "--help"}, {"wait", "--help"}, {"help", "controller"}, {"help", "dev"}, {"help", "mcp"}}
	for _, p := range probes {
		out, _ := ssh(p...)
		for _, s := range canaries {
			if strings.Contains(out, s) {
				t.Errorf("ssh %v printed a secret of the controller's environment:\n%s", p, out)
			}
		}
		for _, f := range []string{"--token", "--addr", "--api-token", "--gossip-key"} {
			if strings.Contains(out, f) {
				t.Errorf("ssh %v shows %s, a flag of the controller's own:\n%s", p, f, out)
			}
		}
	}
	// The server verbs are not in the front door's tree at all.
	for _, v := range []string{"controller", "dev", "node", "holder", "mcp", "try", "replay", "version"} {
		if out, code := ssh(v, "--help"); code == 0 {
			t.Errorf("ssh %s --help: exit 0:\n%s", v, out)
		}
	}
	// help lists what a user may run.
	if out, code := ssh("help"); code != 0 || !strings.Contains(out, "ls") || regexp.MustCompile(`(?m)^  (controller|dev|try) `).MatchString(out) {
		t.Errorf("ssh help: exit %d\n%s", code, out)
	}
}
