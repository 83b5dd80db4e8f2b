package node

import (
	"path/filepath"
	"sync"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// probed is what this machine's kernel can enforce, probed once.
var probed = sync.OnceValue(sandbox.Probe)

// canHide is whether the sandbox wrapper can hide paths by mounts here (as
// root; without root, in a user namespace), tried once.
var canHide = sync.OnceValue(sandbox.CanHide)

// SandboxCaps is what the node can enforce of a sandbox profile.
func (n *Node) SandboxCaps() api.SandboxCaps {
	if n.cfg.SandboxCaps != nil {
		return *n.cfg.SandboxCaps
	}
	return probed()
}

// sandboxFor is the profile a new session of r by w (an agent's of driver)
// runs under: the guard's choice, which the node must be able to enforce in
// full (fail closed: CodeSandbox, nothing runs unconfined).
func (n *Node) sandboxFor(r api.CreateRequest, w guard.Writer, driver string) (*api.SandboxProfile, error) {
	prof, err := n.guard.Sandbox(w, r.Labels, driver, r.Sandbox)
	if err != nil || prof == nil {
		return nil, err
	}
	if err := sandbox.Check(prof, n.SandboxCaps()); err != nil {
		return nil, api.Errorf(api.CodeSandbox, "node %s cannot confine a session as sandbox profile %s asks: %v: nothing was started", n.cfg.Name, prof.Name, err)
	}
	return prof, nil
}

// hidden is what every session of the node is kept out of: its data dir
// (creds, keys, the holder's directory and socket, other sessions' files),
// the holder's directory wherever it is, and Config.Hide, where the kernel has
// Landlock and the wrapper can hide them by mounts (as root, or in a user
// namespace); Config.HideDataDir: also where it cannot, by Landlock alone.
// docs/sandbox.md says what that does not cover.
func (n *Node) hidden() []string {
	if n.SandboxCaps().Landlock < 1 || !(canHide() || n.cfg.HideDataDir) {
		return nil
	}
	var out []string
	paths := append([]string{n.cfg.DataDir}, n.cfg.Hide...)
	if n.cfg.Holder != nil { // its directory is in DataDir, unless put elsewhere
		paths = append(paths, n.cfg.Holder.Dir())
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		out = append(out, abs)
	}
	return out
}

// dirs is the directory a prepared hook channel's agent must still read and
// write below the hidden data dir: its own config directory.
func (p *hookPrep) dirs() []string {
	if p == nil {
		return nil
	}
	dir := p.ch.Dir()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return []string{dir}
}
