package sandbox

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fleetmux/fleetmux/api"
)

// Namespace is a prepared mount namespace (Prepare): the node's mount table as
// it was when it was made, with the hidden paths masked. Wrappers started by
// WrapIn and LaterIn join it when it fits their Spec instead of making a
// namespace of their own. Its methods are safe for concurrent use.
type Namespace struct {
	hide   []string // the paths it hides, sorted, none below another
	marks  []Mark
	host   []hostStat // each of hide as the node saw it when it was made
	mounts rawFile    // the node's mount table, polled for changes
	moved  atomic.Bool

	mu sync.RWMutex
	f  *os.File // the namespace; nil once closed
}

// Mark is how a hidden path looks in a prepared namespace, which a wrapper
// that joins it checks before it trusts it.
type Mark struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // markDir, markFile, markNone
	// Dev is the device of the tmpfs over a directory, or /dev/null's device
	// number over a file.
	Dev uint64 `json:"dev,omitempty"`
}

const (
	markDir  = "dir"  // a directory under a read-only tmpfs of its own
	markFile = "file" // a file under /dev/null
	markNone = "none" // nothing there
)

// Fits reports whether a wrapper under spec may join ns instead of masking:
// spec hides exactly what ns hides, keeps nothing below it (Spec.Write under a
// hidden path is bound back per program), and the node's mount table and the
// hidden paths have not changed since ns was made. A nil or closed ns fits
// nothing.
func (ns *Namespace) Fits(spec Spec) bool {
	if ns == nil || spec.Prepare || !slices.Equal(topHidden(spec.Hide), ns.hide) {
		return false
	}
	for _, k := range spec.Write {
		if slices.ContainsFunc(ns.hide, func(h string) bool { return api.PathUnder(k, h) }) {
			return false
		}
	}
	ns.mu.RLock()
	open := ns.f != nil
	ns.mu.RUnlock()
	return open && !ns.changed()
}

// Stale reports whether ns no longer shows the node's filesystem as a
// namespace made now would (its mount table or a hidden path changed): make
// another.
func (ns *Namespace) Stale() bool { return ns.changed() }

// Hides reports whether ns was made for exactly the paths of hide.
func (ns *Namespace) Hides(hide []string) bool {
	return slices.Equal(topHidden(hide), ns.hide)
}

// dup is a new file of the namespace for one wrapper, nil once ns is closed.
func (ns *Namespace) dup() *os.File {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.f == nil {
		return nil
	}
	return dupFile(ns.f)
}

// Close releases the node's hold on the namespace: it ends when the last
// program in it (or wrapper holding it) does.
func (ns *Namespace) Close() error {
	ns.mu.Lock()
	f := ns.f
	ns.f = nil
	ns.mu.Unlock()
	if f == nil {
		return nil
	}
	ns.mounts.Close()
	return f.Close()
}

// topHidden is hide sorted and without duplicates or paths below another one
// (hidden with it).
func topHidden(hide []string) []string {
	h := slices.Clone(hide)
	slices.Sort(h)
	h = slices.Compact(h)
	out := h[:0]
	for _, p := range h {
		if !slices.ContainsFunc(out, func(o string) bool { return api.PathUnder(p, o) }) {
			out = append(out, p)
		}
	}
	return out
}

func marksPaths(marks []Mark) []string {
	out := make([]string, len(marks))
	for i, m := range marks {
		out[i] = m.Path
	}
	return out
}

// WrapIn is Wrap with the wrapper joining ns when it fits spec (Fits); with a
// nil ns, or one that does not fit, it is Wrap. The namespace is the child's
// fd FD+2 (Child's third file).
func WrapIn(self string, ns *Namespace, spec Spec, argv []string) (*Wrapped, error) {
	var f *os.File
	if ns.Fits(spec) {
		if f = ns.dup(); f != nil {
			spec.Prepared = ns.marks
		}
	}
	w, err := Wrap(self, spec, argv)
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	if f != nil {
		w.Child = append(w.Child, f)
	}
	return w, nil
}

// LaterIn is Later with the wrapper holding ns (nil: none) as its fd FD+2:
// Send has it join ns when ns fits the Spec sent.
func LaterIn(self string, ns *Namespace) (*Wrapped, error) {
	w, err := Later(self)
	if err != nil || ns == nil {
		return w, err
	}
	if f := ns.dup(); f != nil {
		w.Child = append(w.Child, f)
		w.ns = ns
	}
	return w, nil
}
