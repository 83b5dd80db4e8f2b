package session

// What a session's child is given: its program and argv, its working directory, its
// environment (with fleetmux's secrets scrubbed), and a non-blocking PTY master.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"golang.org/x/sys/unix"
)

func nonblockingFile(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("dup pty: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nonblock pty: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// resolveProgram picks the argv and the integrated shell ("" for none).
func resolveProgram(cfg Config) (argv []string, shell string, err error) {
	if cfg.Shell == "" && len(cfg.Argv) > 0 {
		if cfg.Argv[0] == "" {
			return nil, "", fmt.Errorf("%w: empty program name", ErrBadConfig)
		}
		path, err := exec.LookPath(cfg.Argv[0])
		if err != nil {
			return nil, "", fmt.Errorf("%w: %s: %v", ErrStart, cfg.Argv[0], err)
		}
		return append([]string{path}, cfg.Argv[1:]...), "", nil
	}
	if cfg.Shell != "" && len(cfg.Argv) > 0 {
		return nil, "", fmt.Errorf("%w: set Shell or Argv, not both", ErrBadConfig)
	}
	name := cfg.Shell
	if name == "" {
		name = "bash"
	}
	switch filepath.Base(name) {
	case "bash":
		shell = "bash"
	case "zsh":
		shell = "zsh"
	default:
		return nil, "", fmt.Errorf("%w: %q (supported: bash, zsh; run other programs with Argv)", ErrUnknownShell, cfg.Shell)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s not installed: %v", ErrStart, name, err)
	}
	return []string{path}, shell, nil
}

func resolveDir(dir string) (string, error) {
	if dir == "" {
		if h, err := os.UserHomeDir(); err == nil {
			dir = h
		} else {
			dir = "/"
		}
	}
	if strings.ContainsRune(dir, 0) {
		return "", fmt.Errorf("%w: %q", ErrBadCwd, dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCwd, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrBadCwd, abs)
	}
	return abs, nil
}

// ourEnv are variables the integration uses; never inherited from the parent.
var ourEnv = []string{"ZDOTDIR", "FLEETMUX_USER_ZDOTDIR", api.EnvSession}

// buildEnv is the session's environment: BaseEnv (or ours) without our own
// variables and without any fleetmux or NATS secret (api.SecretEnv: a session
// never inherits the agent's token, gossip key or credentials; this is the one
// place every session's environment is made), then Env as the caller gave it.
func buildEnv(cfg Config) ([]string, error) {
	base := cfg.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+len(cfg.Env)+3)
	userZ, hasUserZ := lookupEnv(base, "ZDOTDIR")
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		skip := api.SecretEnv(k)
		for _, o := range ourEnv {
			skip = skip || k == o
		}
		if !skip {
			env = append(env, kv)
		}
	}
	if hasUserZ {
		env = append(env, "ZDOTDIR="+userZ) // kept for zsh to hand back; see Start
	}
	if _, ok := lookupEnv(env, "TERM"); !ok {
		env = append(env, "TERM=xterm-256color")
	}
	for _, kv := range cfg.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(kv, "\x00") || strings.ContainsAny(k, " \t\n") {
			return nil, fmt.Errorf("%w: env entry %q (want KEY=VALUE)", ErrBadConfig, kv)
		}
		env = append(env, kv)
	}
	if cfg.ID != "" {
		env = append(env, api.EnvSession+"="+cfg.ID)
	}
	return env, nil
}

// lookupEnv finds the last value of key in env.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// dedupEnv keeps the last entry of each key, in first-seen order.
func dedupEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}
