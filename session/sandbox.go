package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// sandboxWait bounds how long Start waits for the sandbox wrapper to confine
// itself and exec the program.
const sandboxWait = 10 * time.Second

// wrap wraps argv for the sandbox (Config.Sandbox, Config.Hide): the program may
// still write its integration files, and runs as as's user once confined.
func (s *Session) wrap(argv []string, as *runAs) (*sandbox.Wrapped, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	spec := sandbox.Spec{Profile: s.cfg.Sandbox, Hide: s.cfg.Hide, Cgroup: "s-" + hex.EncodeToString(rnd[:])}
	spec.Write = append(spec.Write, s.cfg.Write...)
	if s.integ != nil {
		spec.Write = append(spec.Write, s.integ.dir)
	}
	if as != nil {
		cr := as.credential()
		spec.Cred, spec.UID, spec.GID, spec.Groups = true, cr.Uid, cr.Gid, cr.Groups
	}
	w, err := sandbox.Wrap("", spec, argv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	return w, nil
}
