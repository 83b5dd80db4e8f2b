package session

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAs is the user a session's program runs as (Config.User).
type runAs struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// lookupUser resolves Config.User. Running a program as another user takes root;
// a node agent that is not root refuses with a clear error.
func lookupUser(name string) (*runAs, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%w: user %q: %v", ErrBadConfig, name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: user %q: uid %s gid %s", ErrBadConfig, name, u.Uid, u.Gid)
	}
	if me := os.Geteuid(); me != 0 && uint64(me) != uid {
		return nil, fmt.Errorf("%w: a session as user %s needs the node agent to run as root (it runs as uid %d)", ErrBadConfig, name, me)
	}
	r := &runAs{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	ids, _ := u.GroupIds()
	for _, g := range ids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			r.groups = append(r.groups, uint32(n))
		}
	}
	return r, nil
}

// credential is the process credential for exec.
func (r *runAs) credential() *syscall.Credential {
	return &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: r.groups}
}

// env is what a login sets for the user.
func (r *runAs) env() []string {
	return []string{"HOME=" + r.home, "USER=" + r.name, "LOGNAME=" + r.name}
}

// give hands path (a file or a directory and what is in it) and the terminal to the
// user: the shell must read its startup files and own its terminal, as after a login.
func (r *runAs) give(paths ...string) error {
	for _, p := range paths {
		err := filepath.Walk(p, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(r.uid), int(r.gid))
		})
		if err != nil {
			return fmt.Errorf("%w: hand over to %s: %v", ErrStart, r.name, err)
		}
	}
	return nil
}
