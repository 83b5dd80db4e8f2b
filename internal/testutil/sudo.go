package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SudoUser creates a local user whose password is secret and who may run anything
// with sudo after typing it (a sudoers.d entry), and removes both at t's cleanup.
// It needs root, sudo, useradd and chpasswd (NeedRoot, NeedTool).
func SudoUser(t testing.TB, secret string) string {
	t.Helper()
	NeedRoot(t)
	NeedTool(t, "sudo")
	NeedTool(t, "useradd")
	NeedTool(t, "chpasswd")
	var b [4]byte
	rand.Read(b[:])
	user := "fmsudo" + hex.EncodeToString(b[:])
	sh := func(stdin string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	sh("", "useradd", "--no-create-home", "--shell", "/bin/bash", user)
	t.Cleanup(func() { exec.Command("userdel", "--force", user).Run() })
	sh(user+":"+secret+"\n", "chpasswd")
	sudoers := filepath.Join("/etc/sudoers.d", "fleetmux-test-"+user)
	if err := os.WriteFile(sudoers, []byte(user+" ALL=(ALL) ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sudoers) })
	return user
}
