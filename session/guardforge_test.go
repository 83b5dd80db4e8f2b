package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// TestGuardVerdictBoundToText performs the forged question of code the shell
// sources (it runs as the shell: it knows the nonce and holds the guard channel):
// it asks about the next line numbers with the text "true", which the guard
// allows. The next real line, which the guard denies, must still be decided for
// its own text and denied: a verdict is never reused for another text. On the old
// code the verdicts were kept by line number only, and the denied line ran from
// the cache.
func TestGuardVerdictBoundToText(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		g := newFakeGuard()
		s := startGuarded(t, shell, g)
		dir := t.TempDir()
		key := `${__fm_hash@P}` // bash: the line number of the line running
		if shell == "zsh" {
			key = `$__fm_gkey`
		}
		evil := filepath.Join(dir, "evil.sh")
		script := "k=" + key + "\nfor i in 1 2 3 4; do builtin printf 'Q %s %s %s l\\ntrue\\0' \"$__fm_nonce\" \"$((k+i))\" \"$((4242+i))\" >&$__fm_gfd; done\n"
		if err := os.WriteFile(evil, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		runCode(t, s, "source "+evil, 0)
		marker := filepath.Join(dir, "marker")
		b := typeLine(t, s, "touch "+marker+" # DENY")
		noFile(t, marker)
		if b.Note != api.NoteDenied+" no-deny" {
			t.Fatalf("the denied line after the forged questions: note %q, exit %v", b.Note, b.ExitCode)
		}
		forged := 0
		for _, l := range g.asked() {
			if l == "true" {
				forged++
			}
		}
		if forged == 0 {
			t.Fatalf("the forged questions never reached the guard (the attack must be performed): asked %q", strings.Join(g.asked(), " | "))
		}
	})
}
