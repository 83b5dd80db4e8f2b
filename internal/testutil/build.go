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
	bin := filepath.Join(dir, "fleetmux")
	cmd = exec.Command(goBin, "build", "-o", bin, "./cmd/fleetmux")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fleetmux: %w\n%s", err, out)
	}
	return bin, nil
}
