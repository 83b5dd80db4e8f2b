package testutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildFleetmux builds ./cmd/fleetmux of this module (the module of the working
// directory: a test's package directory) into dir and returns the binary's path.
func BuildFleetmux(dir string) (string, error) {
	return goBuild(filepath.Join(dir, "fleetmux"), "./cmd/fleetmux")
}

// BuildNATSServer builds nats-server at the version this module's go.mod pins
// (github.com/nats-io/nats-server/v2) into dir and returns the binary's path: a
// real server process for cluster tests (Debian's package is too old).
func BuildNATSServer(dir string) (string, error) {
	return goBuild(filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2")
}

// goBuild runs `go build -o bin pkg` at the root of this module.
func goBuild(bin, pkg string) (string, error) {
	// go test puts its own GOROOT/bin first in the test's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not found in PATH: %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goBin, "build", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// moduleRoot is the nearest directory at or above the working directory (a
// test's package directory) that holds a go.mod: found by looking, not by
// asking the go command (whose failures said only "exit status 1").
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("module root: %w", err)
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("module root: no go.mod at or above %s", wd)
		}
	}
}
