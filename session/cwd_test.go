package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shellQuote quotes s for bash and zsh as $'…', every byte that is not printable ASCII
// (or is ' or \) as \xHH, so the line typed holds no control character.
func shellQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '\'' || c == '\\' {
			fmt.Fprintf(&b, "\\x%02x", c)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteString("'")
	return b.String()
}

// TestCwdWithControlChars performs the attack of a directory whose name holds a mark's
// own syntax (ESC ], BEL, ST, an OSC 133 mark without the nonce, C1 bytes, %): the shell
// reports the cwd in its OSC 7 mark, which carries the nonce; written raw, the name
// ended the mark early and the rest, the nonce with it, went into the output every
// viewer reads. The cwd must come back as the real path, and neither the output stream
// (what logs and recordings read) nor any block's text may hold the nonce or a broken
// mark.
func TestCwdWithControlChars(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		nonce := s.integ.nonce
		base := t.TempDir()
		names := []string{
			"x\x1b]133;A\a",                  // a mark of its own, and BEL: ends OSC 7 early
			"st\x1b\\tail",                   // ST: ends OSC 7 early
			"esc\x1b[31mred",                 // ESC inside the mark
			"bel\aand space",                 // BEL alone
			"pct%41%zz%",                     // % must survive decoding as itself
			"c1\xc2\x9c\x9b\x9d-\x7f-\x01\t", // C1 controls (UTF-8 and bare bytes), DEL, C0
			"ok-é-日本",                        // plain UTF-8
		}
		for i, name := range names {
			dir := filepath.Join(base, fmt.Sprintf("%d-%s", i, name))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if r := run(t, s, "cd "+shellQuote(dir)); exitCode(r) != 0 {
				raw, _ := s.Read(r.Block.Start, int(r.Block.End-r.Block.Start))
				t.Fatalf("cd %q: exit %d (%s), text %q, raw %q", dir, exitCode(r), r.Block.Note, r.Text, raw)
			}
			r := run(t, s, "echo in-dir")
			if exitCode(r) != 0 || r.Text != "in-dir" {
				t.Fatalf("in %q: exit %d text %q; want 0 and in-dir", dir, exitCode(r), r.Text)
			}
			if r.Block.Cwd != dir || s.Info().Cwd != dir {
				t.Errorf("in %q: block cwd %q, session cwd %q", dir, r.Block.Cwd, s.Info().Cwd)
			}
		}
		run(t, s, "cd /")
		if c := s.Info().Cwd; c != "/" {
			t.Errorf("after cd /: cwd %q", c)
		}
		end := s.Info().OutputOffset
		raw, err := s.Read(0, int(end))
		if err != nil || int64(len(raw)) != end {
			t.Fatalf("Read(0, %d): %d bytes, %v", end, len(raw), err)
		}
		for _, bad := range []string{nonce, "fm=", "\x1b]7;"} {
			if bytes.Contains(raw, []byte(bad)) {
				t.Fatalf("the output stream holds %q (nonce %s): %q", bad, nonce, raw)
			}
		}
		for _, b := range s.Blocks() {
			txt, err := s.BlockText(b.N, TextOptions{MaxBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(txt.Text, nonce) || strings.Contains(txt.Text, "fm=") {
				t.Fatalf("block %d (%q) text holds the nonce or a mark: %q", b.N, b.Command, txt.Text)
			}
		}
	})
}
