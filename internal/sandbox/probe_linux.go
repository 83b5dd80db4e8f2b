package sandbox

import (
	"os"

	"github.com/fleetmux/fleetmux/api"
)

func probe() api.SandboxCaps {
	_, err := os.Stat("/proc/self/ns/net")
	return api.SandboxCaps{Landlock: ABI(), NetNS: err == nil && os.Geteuid() == 0, Cgroups: CgroupVersion()}
}
