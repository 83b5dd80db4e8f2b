//go:build !linux

package sandbox

import (
	"fmt"
	"os"
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

// Prepare is unsupported here: nothing is hidden.
func Prepare(string, []string) (*Namespace, error) {
	return nil, fmt.Errorf("%w: on %s", ErrUnsupported, runtime.GOOS)
}

type hostStat struct{}

type rawFile struct{}

func (rawFile) Close() error { return nil }

func (*Namespace) changed() bool { return true }
func dupFile(*os.File) *os.File  { return nil }
