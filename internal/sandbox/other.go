//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/fleetmux/fleetmux/api"
)

const auditArch = 0

func probe() api.SandboxCaps { return api.SandboxCaps{} }

func run(int, []string) error {
	return fmt.Errorf("%w: on %s", ErrUnsupported, runtime.GOOS)
}

// Unprivileged does nothing here: nothing is hidden.
func Unprivileged(*syscall.SysProcAttr) {}

// CanHide is false here: nothing is hidden.
func CanHide() bool { return false }
