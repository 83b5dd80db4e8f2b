package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// ---- OpenSSH (`ssh host cmd`) ----

// sshDriver is a private OpenSSH server on a free loopback port (its own host key,
// config and authorized_keys in a temp dir), driven the way scripts and agents run
// a command on another host: `ssh -i KEY -p PORT USER@127.0.0.1 true`, one process
// and one fresh connection (key exchange, authentication, a session channel) per
// command. With a ControlMaster the commands reuse one connection instead
// (`ssh -o ControlPath=…`).
type sshDriver struct {
	bin    string   // ssh
	dir    string   // keys, config, control socket
	args   []string // client options up to and including USER@127.0.0.1
	env    []string
	sshd   *exec.Cmd
	master *exec.Cmd // ControlMaster, when started
	log    *testutil.Buffer
}

// errNoSSHD says why the ssh variants are left out (a reason, not a failure).
var errNoSSHD = errors.New("OpenSSH server not usable")

// sshdPath finds sshd, which usually lives in /usr/sbin (often not on PATH).
func sshdPath() (string, error) {
	if p, err := exec.LookPath("sshd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: sshd not installed (apt-get install openssh-server)", errNoSSHD)
}

// startSSH starts sshd and checks that `ssh … true` works. A missing or unusable
// OpenSSH returns an error wrapping errNoSSHD (callers skip the variant).
func startSSH(e benchEnv, dir string) (*sshDriver, error) {
	sshd, err := sshdPath()
	if err != nil {
		return nil, err
	}
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		return nil, fmt.Errorf("%w: ssh (client) not installed", errNoSSHD)
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		return nil, fmt.Errorf("%w: ssh-keygen not installed", errNoSSHD)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("%w: current user: %v", errNoSSHD, err)
	}
	if os.Geteuid() == 0 {
		// sshd's privilege separation directory (the service unit usually makes it).
		if _, err := os.Stat("/run/sshd"); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
				return nil, fmt.Errorf("%w: /run/sshd: %v", errNoSSHD, err)
			}
		}
	}
	hostKey, clientKey := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "client_ed25519")
	for _, k := range []string{hostKey, clientKey} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "fmbench", "-f", k).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%w: ssh-keygen: %v: %s", errNoSSHD, err, out)
		}
	}
	pub, err := os.ReadFile(clientKey + ".pub")
	if err != nil {
		return nil, err
	}
	authKeys := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authKeys, pub, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(strings.Join([]string{
		"ListenAddress 127.0.0.1",
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + authKeys,
		"PidFile none",
		"StrictModes no",
		"UsePAM no",
		"PermitRootLogin yes",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"X11Forwarding no",
		"PrintMotd no",
		"PrintLastLog no",
		"UseDNS no",
		"MaxStartups 100:30:200",
		"LogLevel ERROR",
		// bash sources ~/.bashrc for a command run by sshd, but only at SHLVL < 2: so the
		// remote `true` runs without the user's rc file, as fleetmux's sessions run a
		// command without re-reading it (theirs was read once, at creation). ssh is
		// measured at its best, whatever the rc file of the user running the bench.
		"SetEnv SHLVL=1",
		"",
	}, "\n")), 0o600); err != nil {
		return nil, err
	}
	d := &sshDriver{bin: ssh, dir: dir, env: slices.Clone(e.base), log: &testutil.Buffer{Tail: 4 << 10}}
	d.sshd = exec.Command(sshd, "-D", "-e", "-f", conf, "-p", strconv.Itoa(port))
	d.sshd.Stdout, d.sshd.Stderr = d.log, d.log
	d.sshd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.sshd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start sshd: %v", errNoSSHD, err)
	}
	d.args = []string{
		"-F", "/dev/null", // no user or system client config: the same options everywhere
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-i", clientKey, "-p", strconv.Itoa(port),
		u.Username + "@127.0.0.1",
	}
	// Wait for the listener, then for a first command to work.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("%w: sshd did not listen on %d: %s", errNoSSHD, port, d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.exec(); err != nil {
		d.Close()
		return nil, fmt.Errorf("%w: %v", errNoSSHD, err)
	}
	return d, nil
}

// exec runs `ssh … true` over a fresh connection.
func (d *sshDriver) exec() error {
	return d.run("-o", "ControlMaster=no", "-o", "ControlPath=none")
}

// execMux runs `ssh … true` over the ControlMaster's connection.
func (d *sshDriver) execMux() error {
	return d.run("-o", "ControlMaster=no", "-o", "ControlPath="+d.controlPath())
}

func (d *sshDriver) run(opts ...string) error { return d.runRemote([]string{"true"}, opts...) }

// runRemote runs `ssh OPTS ARGS REMOTE...`; a non-zero exit status is an error.
func (d *sshDriver) runRemote(remote []string, opts ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	args := append(slices.Clone(opts), d.args...)
	cmd := exec.CommandContext(ctx, d.bin, append(args, remote...)...)
	cmd.Env = d.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ssh %s: %w: %s (server log: %s)", strings.Join(remote, " "), err, out, d.log.String())
	}
	return nil
}

func (d *sshDriver) controlPath() string { return filepath.Join(d.dir, "cm") }

// startMaster starts a ControlMaster (`ssh -M -N`) and waits until it serves.
func (d *sshDriver) startMaster() error {
	args := append([]string{"-M", "-N", "-o", "ControlPath=" + d.controlPath(), "-o", "ControlPersist=no"}, d.args...)
	d.master = exec.Command(d.bin, args...)
	d.master.Env = d.env
	d.master.Stdout, d.master.Stderr = d.log, d.log
	if err := d.master.Start(); err != nil {
		d.master = nil
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		check := exec.Command(d.bin, "-F", "/dev/null", "-o", "ControlPath="+d.controlPath(), "-O", "check", "x")
		check.Env = d.env
		if check.Run() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ssh ControlMaster not up: %s", d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the ControlMaster and sshd (with the sessions it forked).
func (d *sshDriver) Close() error {
	if d.master != nil {
		_ = d.master.Process.Kill()
		_ = d.master.Wait()
	}
	if d.sshd != nil {
		_ = syscall.Kill(-d.sshd.Process.Pid, syscall.SIGKILL)
		_ = d.sshd.Wait()
	}
	return nil
}

// sshVersion is `ssh -V` (which prints to stderr).
func sshVersion() string {
	out, err := exec.Command("ssh", "-V").CombinedOutput()
	if err != nil {
		return "ssh missing"
	}
	return strings.TrimSpace(string(out))
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
