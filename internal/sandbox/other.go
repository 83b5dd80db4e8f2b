//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"

	"github.com/fleetmux/fleetmux/api"
)

const auditArch = 0

func probe() api.SandboxCaps { return api.SandboxCaps{} }

func run(int, []string) error {
	return fmt.Errorf("%w: on %s", ErrUnsupported, runtime.GOOS)
}
