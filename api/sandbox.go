package api

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// A sandbox profile says what a session's processes may touch, enforced by the
// node's kernel when the session's program starts (docs/sandbox.md): files by
// Landlock, network by a network namespace (none) or Landlock (TCP ports),
// resources by cgroups; no new privileges. Profiles are named in the policy
// document (`sandboxes:`) and chosen by its rules.

// Network modes of a profile.
const (
	NetworkNone = "none" // no network at all: the session gets an empty network namespace
	NetworkTCP  = "tcp"  // TCP connect only to Ports (and no TCP bind); other protocols as full
	NetworkFull = "full" // the node's network
)

// Rest words: what a profile allows of the filesystem outside its listed paths.
const (
	RestRead = "read" // readable (and executable), never writable
	RestHide = "hide" // neither readable nor writable
)

// CodeSandbox is the error code of a create the node cannot confine as its
// profile asks (its kernel lacks a part), or whose asked profile is looser than
// the one the policy chose: nothing runs unconfined.
const CodeSandbox = "sandbox"

// Limits of a profile.
const (
	MaxSandboxPaths = 64
	MaxSandboxPorts = 64
)

// SandboxProfile is one named profile, as the policy defines it and as a
// session's info shows it.
type SandboxProfile struct {
	Name    string         `json:"name"`
	Files   SandboxFiles   `json:"files"`
	Network SandboxNetwork `json:"network"`
	Limits  SandboxLimits  `json:"limits"`
}

// SandboxFiles: absolute, clean paths. Write implies read. A path in Hide is
// unreadable even under a Read path (a Write or Read path below it is allowed).
type SandboxFiles struct {
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
	Hide  []string `json:"hide,omitempty"`
	// Rest is RestRead or RestHide ("" is RestRead).
	Rest string `json:"rest,omitempty"`
}

// SandboxNetwork is the profile's network.
type SandboxNetwork struct {
	Mode  string `json:"mode"`            // NetworkNone, NetworkTCP or NetworkFull
	Ports []int  `json:"ports,omitempty"` // with NetworkTCP: the TCP ports connect may reach
}

// SandboxLimits are the profile's resources; zero is no limit.
type SandboxLimits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int     `json:"pids,omitempty"`
	CPU         float64 `json:"cpu,omitempty"` // CPUs' worth of time, e.g. 0.5
}

// SandboxCaps is what a node's kernel can enforce (GET /v1/nodes, node meta).
type SandboxCaps struct {
	Landlock int  `json:"landlock"` // Landlock ABI version, 0 for none
	NetNS    bool `json:"netns"`    // can make a session's empty network namespace
	Cgroups  int  `json:"cgroups"`  // cgroup version with pids and memory usable (1, 2), 0 for none
}

// String is caps in a short form for node metadata and listings:
// "landlock=7 netns cgroup=1" (a part the node lacks is left out; "none").
func (c SandboxCaps) String() string {
	var parts []string
	if c.Landlock > 0 {
		parts = append(parts, fmt.Sprintf("landlock=%d", c.Landlock))
	}
	if c.NetNS {
		parts = append(parts, "netns")
	}
	if c.Cgroups > 0 {
		parts = append(parts, fmt.Sprintf("cgroup=%d", c.Cgroups))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Validate checks a profile's words, paths and numbers.
func (p *SandboxProfile) Validate() error {
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("sandbox profile: %w", err)
	}
	f := p.Files
	if f.Rest != "" && f.Rest != RestRead && f.Rest != RestHide {
		return fmt.Errorf("sandbox profile %s: files rest %q (want read or hide)", p.Name, f.Rest)
	}
	for _, list := range [][]string{f.Read, f.Write, f.Hide} {
		if len(list) > MaxSandboxPaths {
			return fmt.Errorf("sandbox profile %s: over %d paths", p.Name, MaxSandboxPaths)
		}
		for _, path := range list {
			if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsRune(path, 0) {
				return fmt.Errorf("sandbox profile %s: path %q is not absolute and clean", p.Name, path)
			}
		}
	}
	switch p.Network.Mode {
	case NetworkNone, NetworkFull:
		if len(p.Network.Ports) > 0 {
			return fmt.Errorf("sandbox profile %s: ports only with network tcp", p.Name)
		}
	case NetworkTCP:
		if len(p.Network.Ports) > MaxSandboxPorts {
			return fmt.Errorf("sandbox profile %s: over %d ports", p.Name, MaxSandboxPorts)
		}
		for _, port := range p.Network.Ports {
			if port < 1 || port > 65535 {
				return fmt.Errorf("sandbox profile %s: port %d", p.Name, port)
			}
		}
	default:
		return fmt.Errorf("sandbox profile %s: network %q (want none, tcp or full)", p.Name, p.Network.Mode)
	}
	l := p.Limits
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPU < 0 || l.CPU > 4096 {
		return fmt.Errorf("sandbox profile %s: negative or huge limits", p.Name)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return fmt.Errorf("sandbox profile %s: memory under 4 MiB", p.Name)
	}
	return nil
}

// AtLeastAsStrict reports whether p allows no more than q does: every path p
// lets write q lets write, p reads nothing q hides, p's network is within q's,
// and p's limits are no higher. It is what `create` checks when it asks for a
// profile other than the policy's choice.
func (p *SandboxProfile) AtLeastAsStrict(q *SandboxProfile) bool {
	for _, w := range p.Files.Write {
		if !under(w, q.Files.Write) {
			return false
		}
	}
	if p.Files.Rest != RestHide && q.Files.Rest == RestHide {
		return false // p reads the rest, q hides it
	}
	for _, h := range q.Files.Hide {
		if !under(h, p.Files.Hide) && (p.Files.Rest != RestHide || readsInside(h, p)) {
			return false
		}
	}
	if q.Files.Rest == RestHide {
		for _, r := range append(slices.Clone(p.Files.Read), p.Files.Write...) {
			if !under(r, q.Files.Read) && !under(r, q.Files.Write) {
				return false
			}
		}
	}
	switch q.Network.Mode {
	case NetworkNone:
		if p.Network.Mode != NetworkNone {
			return false
		}
	case NetworkTCP:
		if p.Network.Mode == NetworkFull {
			return false
		}
		if p.Network.Mode == NetworkTCP {
			for _, port := range p.Network.Ports {
				if !slices.Contains(q.Network.Ports, port) {
					return false
				}
			}
		}
	}
	lower := func(a, b float64) bool { return b == 0 || a != 0 && a <= b }
	return lower(float64(p.Limits.MemoryBytes), float64(q.Limits.MemoryBytes)) &&
		lower(float64(p.Limits.Pids), float64(q.Limits.Pids)) && lower(p.Limits.CPU, q.Limits.CPU)
}

// readsInside reports whether p grants a read or write path at or below h.
func readsInside(h string, p *SandboxProfile) bool {
	for _, r := range append(slices.Clone(p.Files.Read), p.Files.Write...) {
		if PathUnder(r, h) || PathUnder(h, r) {
			return true
		}
	}
	return false
}

// under reports whether path is at or below one of roots.
func under(path string, roots []string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return PathUnder(path, r) })
}

// PathUnder reports whether path is root or below it (both clean, absolute).
func PathUnder(path, root string) bool {
	if root == "/" {
		return true
	}
	return path == root || strings.HasPrefix(path, root+"/")
}
