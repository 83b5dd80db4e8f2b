package sandbox

import (
	"fmt"

	"github.com/fleetmux/fleetmux/api"
)

// Probe is what this machine's kernel can enforce for a node running as this
// process's user.
func Probe() api.SandboxCaps {
	return probe()
}

// Check reports (ErrUnsupported) whether caps can enforce p: files need
// Landlock, TCP ports Landlock ABI 4, network none a namespace, limits cgroups.
func Check(p *api.SandboxProfile, caps api.SandboxCaps) error {
	if caps.Landlock < 1 {
		return fmt.Errorf("%w: profile %s: the kernel has no Landlock", ErrUnsupported, p.Name)
	}
	switch p.Network.Mode {
	case api.NetworkTCP:
		if caps.Landlock < 4 {
			return fmt.Errorf("%w: profile %s: TCP port rules need Landlock ABI 4 (the kernel has %d)", ErrUnsupported, p.Name, caps.Landlock)
		}
	case api.NetworkNone:
		if !caps.NetNS {
			return fmt.Errorf("%w: profile %s: network none needs a network namespace (the node runs without root)", ErrUnsupported, p.Name)
		}
	}
	if p.Limits != (api.SandboxLimits{}) && caps.Cgroups == 0 {
		return fmt.Errorf("%w: profile %s: limits need cgroups (pids, memory) and root", ErrUnsupported, p.Name)
	}
	if auditArch == 0 {
		return fmt.Errorf("%w: profile %s: no seccomp filter for this architecture", ErrUnsupported, p.Name)
	}
	return nil
}
