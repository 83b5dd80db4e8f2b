// Package datadir is how fleetmux trusts its data directory: only when it belongs
// to the user running fleetmux and nobody else can write to it, and even then it
// never follows a link in it. Every file fleetmux writes under its data dir is
// created, replaced or opened through this package (node, controller, transport,
// cmd/fleetmux).
//
// Why: a data dir that others can write lets them plant a link where fleetmux
// writes (http.url, audit.jsonl, a recording) and have fleetmux overwrite any
// file it can write; a host key others can read is a host key they have.
package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUnsafe is returned for a data dir, or a file in it, that fleetmux refuses to
// trust. Its message says how to fix it.
var ErrUnsafe = errors.New("refused")

// maxRead bounds ReadFile: the files fleetmux reads whole are small.
const maxRead = 16 << 20

// Ensure creates dir (0700, with its parents) when missing, then checks it with
// Check. Every server command calls it on --data before writing anything there.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return Check(dir)
}

// Check refuses a data dir that is not a directory, does not belong to the
// effective user, or that group or others may write to.
func Check(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return checkDir(dir, st, "data dir")
}

// Mkdir makes the directory path (0700) inside a checked data dir, or checks the
// one that is there: a real directory (not a link), the user's, not writable by
// group or others.
func Mkdir(path string) error {
	err := os.Mkdir(path, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symbolic link: fleetmux follows no link in its data dir; remove it", ErrUnsafe, path)
	}
	return checkDir(path, st, "directory")
}

func checkDir(dir string, st fs.FileInfo, what string) error {
	if !st.IsDir() {
		return fmt.Errorf("%w: %s %s is not a directory", ErrUnsafe, what, dir)
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return fmt.Errorf("%w: %s %s belongs to uid %d, not to you (uid %d): use a directory of your own (--data)",
			ErrUnsafe, what, dir, uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s %s can be written by others (mode %04o): run chmod go-w %s (fleetmux makes it 0700), or use another --data",
			ErrUnsafe, what, dir, st.Mode().Perm(), dir)
	}
	return nil
}

// CheckPrivate refuses a secret file (a private key) that is a link, is not a
// regular file, does not belong to the effective user, or that group or others
// may read or write, as OpenSSH refuses an unprotected private key.
func CheckPrivate(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (a link?): remove it", ErrUnsafe, path)
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not to you (uid %d): a private key must be yours (chown it, or remove it to make a new one)",
			ErrUnsafe, path, uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s can be read or written by others (mode %04o): run chmod 600 %s", ErrUnsafe, path, st.Mode().Perm(), path)
	}
	return nil
}

// OpenFile opens path like os.OpenFile, but never through a link (O_NOFOLLOW)
// and only a regular file. Use it for every file fleetmux opens for writing in
// its data dir (O_EXCL to create a new one, O_APPEND to add to one).
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link: fleetmux follows no link in its data dir; remove it", ErrUnsafe, path)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file: remove it", ErrUnsafe, path)
	}
	return f, nil
}

// ReadFile reads a small file (at most 16 MiB), never through a link.
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRead+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRead {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxRead)
	}
	return b, nil
}

// WriteFile replaces path with data, mode perm, atomically (a temporary file in
// the same directory, renamed over it, so a reader never sees half of it). It
// refuses when path is a link or anything but a regular file: a planted link is
// reported, never followed, and what it points to is never touched.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		what := "not a regular file"
		if st.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link"
		}
		return fmt.Errorf("%w: %s is %s: fleetmux follows no link in its data dir; remove it", ErrUnsafe, path, what)
	}
	// CreateTemp uses O_EXCL, which never follows a link either.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	// rename replaces a link that appeared since the check; it never follows it.
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// owner is the uid that owns st, when the platform says.
func owner(st fs.FileInfo) (int, bool) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), true
	}
	return 0, false
}
