package session

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Shell integration is injected without touching any user file. The shells' code is in
// shell/ (*.bash checked with shellcheck, *.zsh with zsh -n, by .ci/run), embedded
// here and written, put together as below, to a per-session directory:
//
//   - bash runs as `bash --rcfile DIR/bashrc -i`; our rc sources the user's ~/.bashrc
//     first (bash itself reads /etc/bash.bashrc), then installs the hooks.
//   - zsh runs with ZDOTDIR=DIR; our .zshenv/.zprofile/.zshrc/.zlogin source the user's
//     files (with the user's ZDOTDIR restored while they run) and then install the hooks.
//
// The nonce is never in a file, nor in the shell's argv or environment (all readable by
// other processes of the same user): the shell inherits one end of a socket pair as fd
// nonceFD, from which our rc reads the nonce with a builtin and which it closes before
// any user file runs, so no command the user runs inherits it; the nonce stays in an
// unexported shell variable. A socket, not a pipe: a pipe could be opened by another
// process of the user through /proc/PID/fd/3 while the shell starts, a socket cannot
// (ENXIO). Code that runs as the same user can still read the shell's memory where the
// kernel lets it ptrace (Yama ptrace_scope 0): sessions for untrusted code run as
// another user (README).

// nonceFD is the shell's fd that carries the nonce (exec.Cmd.ExtraFiles[0]).
const nonceFD = 3

// integrationDir holds the per-session startup files, and the nonce the shell reads
// from fd nonceFD.
type integrationDir struct {
	dir   string
	nonce string
}

// nonceSocket returns the shell's end of a socket pair that holds nonce and then
// EOF: our end is written and closed here. The caller passes it as the child's fd
// nonceFD and closes it once the child started.
func nonceSocket(nonce string) (*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("session: nonce socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "nonce")
	theirs := os.NewFile(uintptr(fds[1]), "nonce")
	_, err = ours.Write([]byte(nonce + "\n")) // 33 bytes: far below the socket's buffer
	if cerr := ours.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("session: nonce socket: %w", err)
	}
	return theirs, nil
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// writeIntegration creates the startup files for shell (bash or zsh) under parent;
// guarded adds the guard's hooks (guard.go, shell/guard.*).
func writeIntegration(parent, shell string, guarded bool) (*integrationDir, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "fleetmux-sh-")
	if err != nil {
		return nil, fmt.Errorf("session: integration dir: %w", err)
	}
	// 0700 whatever the umask: a sandboxed shell, root or not, has no
	// capability to enter a directory without its search bit.
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session: integration dir: %w", err)
	}
	files := integrationFiles(shell, guarded)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("session: integration file: %w", err)
		}
	}
	return &integrationDir{dir: dir, nonce: nonce}, nil
}

// BashRC writes, under parent, the startup files a bash session runs with and
// returns the rc file (run `bash --rcfile RCFILE -i`), the nonce its marks carry
// (OSC 133 "fm=NONCE;A" and so on), and the file the shell reads the nonce from,
// which must be its fd 3 (exec.Cmd.ExtraFiles[0]; close it once the shell started).
// It is for benchmarks that measure fleetmux's shell hooks without a Session; the
// caller removes the files with parent.
func BashRC(parent string) (rcfile, nonce string, nonceFile *os.File, err error) {
	d, err := writeIntegration(parent, "bash", false)
	if err != nil {
		return "", "", nil, err
	}
	f, err := nonceSocket(d.nonce)
	if err != nil {
		d.remove()
		return "", "", nil, err
	}
	return filepath.Join(d.dir, "bashrc"), d.nonce, f, nil
}

func (d *integrationDir) remove() {
	if d != nil {
		os.RemoveAll(d.dir)
	}
}

// The shells' code (shell/). Each file's head says what it does.
var (
	//go:embed shell/bashrc.bash
	bashRC string // our --rcfile
	//go:embed shell/guard.bash
	bashGuard string // follows bashRC in a guarded session's rc (guard.go)
	//go:embed shell/zshenv.zsh
	zshEnv string // .zshenv's head: reads the nonce, notes the ZDOTDIRs
	//go:embed shell/user.zsh
	zshUserBody string // sources the user's file named by __fm_f
	//go:embed shell/restore.zsh
	zshRestore string // gives the user's ZDOTDIR back
	//go:embed shell/hooks.zsh
	zshHooks string // the hooks, in .zshrc
	//go:embed shell/guard.zsh
	zshGuard string // follows zshHooks in a guarded session's .zshrc (guard.go)
)

// integrationFiles returns the startup files, by name, that shell (bash or zsh) runs
// with; guarded adds the guard's hooks. The only text put in is the name of the
// user's file that zshUserBody sources (__fm_f, a constant here) and the if/fi around
// zshRestore.
func integrationFiles(shell string, guarded bool) map[string]string {
	files := map[string]string{}
	switch shell {
	case "bash":
		files["bashrc"] = bashRC
		if guarded {
			files["bashrc"] = bashRC + bashGuard
		}
	case "zsh":
		// A non-interactive zsh reads no file after .zshenv, an interactive one
		// that is not a login shell none after .zshrc: each gives ZDOTDIR back then.
		files[".zshenv"] = zshEnv + zshUserBody + "if [[ ! -o interactive ]]; then\n" + zshRestore + "fi\n"
		files[".zprofile"] = zshUser(".zprofile")
		hooks := zshHooks
		if guarded {
			hooks += zshGuard
		}
		files[".zshrc"] = zshUser(".zshrc") + hooks + "if [[ ! -o login ]]; then\n" + zshRestore + "fi\n"
		files[".zlogin"] = zshUser(".zlogin") + zshRestore
	}
	return files
}

// zshUser is zshUserBody for the user's file name.
func zshUser(name string) string {
	return "__fm_f=" + name + "\n" + zshUserBody
}
