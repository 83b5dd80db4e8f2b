package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	env := append(os.Environ(), "GOTOOLCHAIN=local")
	cmd := exec.Command(goBin, "env", "GOMOD")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not in a module")
	}
	cmd = exec.Command(goBin, "build", "-o", bin, pkg)
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
