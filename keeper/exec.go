package keeper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/proc"
)

// Exec is one kept exec as an agent sees it, read from its directory: its
// methods are those of a proc.Proc the node uses. Safe for concurrent use.
type Exec struct {
	dir  string
	meta Meta

	mu    sync.Mutex // guards the fields below
	child bool       // this process launched the keeper and has not reaped it
	ended bool
	exit  proc.Exit
}

// pollEvery is how often Wait looks for exit.json.
const pollEvery = 10 * time.Millisecond

// Open reads the exec in dir (its meta.json; how it ended, when it has).
func Open(dir string) (*Exec, error) {
	b, err := datadir.ReadFile(filepath.Join(dir, MetaName))
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("keeper: %s: %w", filepath.Join(dir, MetaName), err)
	}
	if err := api.ValidName(m.ID); err != nil || m.ID != filepath.Base(dir) || m.Chunk < 1 || m.Chunk > maxChunk || m.Keeper <= 0 {
		return nil, fmt.Errorf("keeper: %s: not an exec's meta (id %q, chunk %d, keeper %d)", filepath.Join(dir, MetaName), m.ID, m.Chunk, m.Keeper)
	}
	x := &Exec{dir: dir, meta: m}
	x.Exit()
	return x, nil
}

// ID is the exec's id; Argv its argv as started (redacted); Owner the principal
// that started it; Dir its directory.
func (x *Exec) ID() string     { return x.meta.ID }
func (x *Exec) Argv() []string { return x.meta.Argv }
func (x *Exec) Owner() string  { return x.meta.Owner }
func (x *Exec) Dir() string    { return x.dir }

// Started is when the program started.
func (x *Exec) Started() time.Time { return x.meta.StartedAt }

// Duration is how long it ran (so far, while it runs).
func (x *Exec) Duration() time.Duration {
	if ex, ok := x.Exit(); ok {
		return ex.Duration
	}
	return time.Since(x.meta.StartedAt)
}

// Exit is how the program ended; ok is false while it runs. A keeper that is
// gone without writing exit.json (killed itself, or the host rebooted) ends
// the exec as lost: Code -1, Signal api.ExecLost (written to exit.json, so every
// later agent says the same).
func (x *Exec) Exit() (ex proc.Exit, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended {
		return x.exit, true
	}
	if x.readExit() {
		return x.exit, true
	}
	if x.keeperAlive() {
		return proc.Exit{}, false
	}
	if x.readExit() { // it wrote exit.json and exited since the first look
		return x.exit, true
	}
	// The program died with its keeper (its parent-death signal), but what it
	// started in the background did not: it ends too, not to run unseen.
	killLeft(x.meta)
	lost := exitFile{Code: -1, Signal: api.ExecLost, Duration: int64(time.Since(x.meta.StartedAt))}
	_ = writeJSON(filepath.Join(x.dir, ExitName), lost)
	x.ended, x.exit = true, proc.Exit{Code: lost.Code, Signal: lost.Signal, Duration: time.Duration(lost.Duration)}
	return x.exit, true
}

// readExit reads exit.json when it is there (x.mu held).
func (x *Exec) readExit() bool {
	b, err := datadir.ReadFile(filepath.Join(x.dir, ExitName))
	if err != nil {
		return false
	}
	var e exitFile
	if json.Unmarshal(b, &e) != nil {
		return false
	}
	x.ended = true
	x.exit = proc.Exit{Code: e.Code, Signal: e.Signal, Killed: e.Killed, Duration: time.Duration(e.Duration)}
	return true
}

// keeperAlive reports whether the keeper still runs: its pid has its start
// time and is no zombie. A keeper of this process's is reaped once it ended
// (x.mu held).
func (x *Exec) keeperAlive() bool {
	pid := x.meta.Keeper
	if x.child {
		var ws syscall.WaitStatus
		if wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid || errors.Is(err, syscall.ECHILD) {
			x.child = false
			return false
		}
	}
	st, err := procStat(pid)
	return err == nil && st.start == x.meta.KeeperStart && st.state != 'Z' && st.state != 'X'
}

// Wait waits until the program ends or ctx does (ok false).
func (x *Exec) Wait(ctx context.Context) (proc.Exit, bool) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if ex, ok := x.Exit(); ok {
			return ex, true
		}
		select {
		case <-ctx.Done():
			return proc.Exit{}, false
		case <-t.C:
		}
	}
}

// Kill asks the keeper to end the program and its process group (SIGTERM to
// the keeper, once its pid is checked to be the keeper's); its exit says
// Killed. Nothing once it has ended.
func (x *Exec) Kill() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended || x.readExit() || !x.keeperAlive() {
		return
	}
	_ = syscall.Kill(x.meta.Keeper, syscall.SIGTERM)
}

// Remove removes the exec's directory (an ended exec the node forgets).
func (x *Exec) Remove() error { return os.RemoveAll(x.dir) }

// stream lists one of the exec's streams.
func (x *Exec) stream(name string) (stream, error) {
	if name != api.StreamStdout && name != api.StreamStderr {
		return stream{}, fmt.Errorf("stream %q: want stdout or stderr", name)
	}
	return openStream(x.dir, name, x.meta.Chunk)
}

// Cut returns a stream cut to at most budget bytes (head and tail around a
// marker line), how many bytes it leaves out, and the stream's length.
func (x *Exec) Cut(name string, budget int) (text []byte, omitted, length int64) {
	for try := 0; ; try++ {
		s, err := x.stream(name)
		if err != nil {
			return nil, 0, 0
		}
		text, omitted, err = s.cut(budget)
		if !errors.Is(err, errGone) || try == 2 { // a chunk rotated away under the read: again
			return text, omitted, s.end
		}
	}
}

// ReadAt returns up to limit bytes of a stream from offset from (as
// proc.Proc.ReadAt).
func (x *Exec) ReadAt(name string, from int64, limit int) (data []byte, off, end, oldest int64, err error) {
	for try := 0; ; try++ {
		s, err := x.stream(name)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		data, off, err = s.readAt(from, limit)
		if err == nil || !errors.Is(err, errGone) || try == 2 {
			return data, off, s.end, s.oldest, nil
		}
	}
}

// Scan opens every exec in dir (DATA/execs); a directory that holds no exec
// (no meta.json: its keeper never ran the program) is removed when older than
// a minute, and one whose name is not an exec id is left alone.
func Scan(dir string) ([]*Exec, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Exec
	for _, e := range ents {
		if !e.IsDir() || api.ValidName(e.Name()) != nil {
			continue
		}
		p := filepath.Join(dir, e.Name())
		x, err := Open(p)
		if err != nil {
			if fi, serr := e.Info(); serr == nil && time.Since(fi.ModTime()) > time.Minute {
				_ = os.RemoveAll(p)
			}
			continue
		}
		out = append(out, x)
	}
	return out, nil
}

// stat is what the keeper reads of a process's /proc/PID/stat.
type stat struct {
	state     byte   // R, S, Z, X…
	pgid, sid int    // its process group and session
	start     uint64 // when it started, in clock ticks after boot
}

// procStat reads pid's /proc/PID/stat.
func procStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	return parseStat(b)
}

// parseStat parses a /proc/PID/stat line: "PID (COMM) STATE PPID PGRP SESSION
// …", where COMM may hold spaces and parens (the fields follow its last ')'),
// and starttime is field 22.
func parseStat(b []byte) (stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, errors.New("stat: no command")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 || !(f[0][0] >= 'A' && f[0][0] <= 'Z' || f[0][0] >= 'a' && f[0][0] <= 'z') {
		return stat{}, fmt.Errorf("stat: %d fields, or no state letter", len(f))
	}
	st := stat{state: f[0][0]}
	var err1, err2, err3 error
	st.pgid, err1 = strconv.Atoi(string(f[2]))
	st.sid, err2 = strconv.Atoi(string(f[3]))
	st.start, err3 = strconv.ParseUint(string(f[19]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stat{}, fmt.Errorf("stat: %w", err)
	}
	return st, nil
}

// killLeft kills what a keeper that is gone left behind: the processes still
// in its session (made by the keeper: its id is the keeper's pid) and in its
// program's process group, started after it, in this boot. The kernel keeps a
// session's and a group's id from being reused while any member lives, so once
// no process has the keeper's pid (or only its unreaped zombie) such processes
// are its leftovers; each is signalled through a pidfd opened before it is
// checked again, so a pid reused meanwhile is never hit.
func killLeft(m Meta) {
	if m.Keeper <= 1 || m.Pgid <= 1 || m.StartedAt.Before(bootTime()) {
		return
	}
	if st, err := procStat(m.Keeper); err == nil && (st.start != m.KeeperStart || st.state != 'Z' && st.state != 'X') {
		return // that pid runs again (or still): no keeper's session to end
	}
	left := func(pid int) bool {
		st, err := procStat(pid)
		return err == nil && st.sid == m.Keeper && st.pgid == m.Pgid && st.start >= m.KeeperStart
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() || !left(pid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if left(pid) {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
}

// bootTime is when the host booted (btime in /proc/stat); the zero time when
// it cannot be read.
func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("btime ")); ok {
			if sec, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}

// procStart is a process's start time (procStat).
func procStart(pid int) (uint64, error) {
	st, err := procStat(pid)
	return st.start, err
}
