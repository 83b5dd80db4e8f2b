package node_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// thief runs in one session and tries to steal the nonces of sessions that start
// after it, in every place a process of the same user could look: the nonce files
// of the run dir (a tight loop of builtins), every process's argv and environment,
// and the fds 3-9 of every shell (opened through /proc, read without blocking).
// With each nonce it finds, it writes a forged block end (D;0) and text into the
// terminal of every process whose environment holds this test's victim mark, over and
// over (only those: bytes written to a terminal are its output, and other tests' and
// people's terminals are not the test's to write to).
const thief = `RUN=%s; OUT=$(mktemp); end=$((SECONDS+%d))
( while (( SECONDS < end )); do for f in "$RUN"/*/nonce; do read -r n < "$f" && echo "$n" >> "$OUT"; done 2>/dev/null; done ) &
( while (( SECONDS < end )); do
	grep -aohE '[0-9a-f]{32}' /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null >> "$OUT"
	for p in /proc/[0-9]*; do
		case $(cat "$p/comm" 2>/dev/null) in bash|zsh) ;; *) continue ;; esac
		for fd in 3 4 5 6 7 8 9; do
			[[ -e $p/fd/$fd ]] || continue
			timeout 0.2 dd if="$p/fd/$fd" iflag=nonblock bs=64 count=1 2>/dev/null | grep -aoE '[0-9a-f]{32}' >> "$OUT"
		done
	done
done ) &
while (( SECONDS < end )); do
	for n in $(sort -u "$OUT"); do
		for p in /proc/[0-9]*; do
			grep -qa 'FM_NONCE_VICTIM=%s' "$p/environ" 2>/dev/null || continue
			t=$(readlink "$p/fd/0" 2>/dev/null); [[ $t == /dev/pts/* ]] || continue
			printf '\e]133;fm=%%s;D;0\aFORGED\r\n' "$n" > "$t"
		done 2>/dev/null
	done
	sleep 0.05
done; wait; echo "stolen=$(sort -u "$OUT" | wc -l)"`

// TestNonceTheftCannotForgeBlocks is issue 15 #3: a program in session s1 stole
// the nonces of new sessions (from <data>/run/fleetmux-sh-*/nonce, named by the
// shells' argv) and ended their blocks with a forged D;0 and text. The nonce now
// reaches the shell over an inherited socket that the rc reads and closes: the
// thief finds nothing, every block ends when its command does, and no command in
// a session inherits the socket.
func TestNonceTheftCannotForgeBlocks(t *testing.T) {
	testutil.NeedTool(t, "timeout")
	f := newFixture(t)
	s1 := f.create(api.CreateRequest{})
	var r api.BlockResult
	mark := fmt.Sprintf("victim-%d", time.Now().UnixNano()) // names this test's victims
	f.mustCall("run", api.RunRequest{Session: s1.ID, Command: fmt.Sprintf(thief, filepath.Join(f.data, "run"), 25, mark), TimeoutMS: 100}, &r)
	shells := []string{"bash", "zsh", "bash", "zsh", "bash"}
	for i, shell := range shells {
		if shell == "zsh" && !haveZsh(t) {
			continue
		}
		s := f.create(api.CreateRequest{Shell: shell, Env: map[string]string{"FM_NONCE_VICTIM": mark}})
		res := f.run(s.ID, fmt.Sprintf("sleep 1; echo real-end-%d", i))
		if !strings.Contains(res.Text, fmt.Sprintf("real-end-%d", i)) || res.Block.ExitCode == nil || *res.Block.ExitCode != 0 {
			t.Errorf("%s session %s: the block ended before its command did (a forged end): %q exit %s", shell, s.ID, res.Text, exitOf(res))
		}
		// The nonce's fd is closed before any user file runs: neither the shell
		// nor a command it runs holds it.
		fds := f.run(s.ID, "ls -l /proc/self/fd/ /proc/$$/fd/").Text
		if strings.Contains(fds, "socket:") {
			t.Errorf("%s session %s: a command or the shell holds the nonce's fd:\n%s", shell, s.ID, fds)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(f.data, "run", "*", "nonce")); len(ents) != 0 {
		t.Errorf("nonce files: %v", ents)
	}
}

// haveZsh reports whether zsh is in PATH (testutil: logged when it is not, a failure
// under FLEETMUX_TEST_STRICT=1).
func haveZsh(t *testing.T) bool { return testutil.WantTool(t, "zsh") != "" }

// TestSessionAsUser: --user runs the shell as another user (the answer to the
// limit README names: same-user code can read a shell's memory), with working
// integration (the nonce reaches it over fd 3) and that user's login variables.
func TestSessionAsUser(t *testing.T) {
	testutil.NeedRoot(t)
	f := newFixture(t)
	for _, shell := range []string{"bash", "zsh"} {
		if shell == "zsh" && !haveZsh(t) {
			continue
		}
		s := f.create(api.CreateRequest{Shell: shell, User: "nobody"})
		res := f.run(s.ID, "id -un; echo $HOME $USER; (exit 4)")
		if res.Text != "nobody\n/nonexistent nobody" || res.Block.ExitCode == nil || *res.Block.ExitCode != 4 {
			t.Errorf("%s as nobody: %q exit %s", shell, res.Text, exitOf(res))
		}
	}
	if err := f.call("create", api.CreateRequest{User: "no-such-user-here"}, nil); code(err) != api.CodeBadRequest {
		t.Errorf("unknown user: %v", err)
	}
}

func exitOf(r api.BlockResult) string {
	if r.Block.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*r.Block.ExitCode)
}
