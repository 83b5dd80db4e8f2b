package session

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/internal/ring"
)

// machine is a session without a process: marks and output are fed by hand.
func machine() *Session {
	s := &Session{ring: ring.New(1 << 16), integrated: true, integRemoved: true, rows: 24, cols: 80,
		cwd: "/", log: slog.Default(), changed: make(chan struct{}), noted: make(chan struct{})}
	s.follow.init()
	return s
}

// feed applies steps: "A" "B" "C" "P" (marks), "D<n>" / "N<n>" (with exit status n),
// "D" (no status), "run:<cmd>" (a Run submission at the prompt, as reserve makes it)
// and "out:<text>" (output). A submission while a block is open is skipped, as Run
// refuses it.
func feed(s *Session, steps string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range strings.Split(steps, " ") {
		off := s.ring.End()
		switch {
		case strings.HasPrefix(st, "out:"):
			s.ring.Write([]byte(strings.ReplaceAll(st[4:], "_", " ") + "\r\n"))
		case strings.HasPrefix(st, "run:"):
			if s.pending != nil || s.cur != nil || s.fallback != nil {
				continue // Run refuses a busy shell (ErrBusy)
			}
			b := s.newBlockLocked(strings.ReplaceAll(st[4:], "_", " "), off)
			b.echoFrom = b.Start
			s.pending = b
		case st == "A", st == "B", st == "C", st == "P":
			m := mark{kind: markKind(st[0])}
			if st == "P" {
				m = mark{kind: markCwd, cwd: "/tmp"}
			}
			s.applyMarkLocked(m, off)
		case st[0] == 'D', st[0] == 'N', st[0] == 'R':
			m := parse133(st[:1] + ";" + st[1:])
			s.applyMarkLocked(m, off)
		default:
			panic("bad step " + st)
		}
		s.updateStateLocked()
	}
}

// blockLine renders a block as "command=code" (code "?" when unknown, "…" while running).
func blockLine(b Block) string {
	code := "…"
	if b.State == BlockDone {
		code = "?"
		if b.ExitCode != nil {
			code = strconv.Itoa(*b.ExitCode)
		} else if b.Note == "" {
			code = "?(no note)"
		}
	}
	return b.Command + "=" + code
}

// TestBlockMachine feeds the block state machine every kind of lost, duplicated and
// out-of-order mark: a broken mark costs at most its own block's exit code (which
// then ends unknown, with a note), never the next block's.
func TestBlockMachine(t *testing.T) {
	cases := []struct {
		name, steps string
		want        string // blocks, "command=code" joined by " | "
		idle        bool
	}{
		{"normal", "P A B run:a C out:x D0 P A B run:b C D3 P A B", "a=0 | b=3", true},
		{"typed command", "P A B out:ls C out:x D0 P A B", "ls=0", true},
		{"parse error (N with a new status)", "D0 P A B run:fi out:syntax_error N2 P A B", "fi=2", true},
		{"parse error, same status as before", "D2 P A B run:fi out:syntax_error N2 P A B", "fi=2", true},
		{"interrupted continuation", "D0 P A B run:if_true;_then N130 P A B", "if true; then=130", true},
		{"comment only", "D1 P A B run:#_note N1 P A B", "# note=?", true},
		{"typed parse error", "D0 P A B out:fi out:syntax_error N2 P A B", "fi=2", true},
		{"typed Ctrl-C at the prompt", "D0 P A B out:abc N130 P A B", "", true},
		{"empty Enter", "D0 P A B N0 P A B N0 P A B", "", true},
		{"lost D", "P A B run:a C out:x P A B run:b C D4 P A B", "a=? | b=4", true},
		{"lost D, next command typed", "P A B run:a C out:x A B out:b C D4 P A B", "a=? | b=4", true},
		{"duplicated D", "P A B run:a C D1 D1 P A B run:b C D0 D0 P A B", "a=1 | b=0", true},
		{"A before D (late D)", "P A B run:a C out:x A B D7 P A B run:b C D0 P A B", "a=7 | b=0", true},
		{"C without B", "P A run:a C D0 P A run:b C D2 P A", "a=0 | b=2", true},
		{"C without A or B", "P A B run:a C D0 P C D2 P A B", "a=0 | =2", true},
		{"D without C (C lost)", "P A B run:a out:x D6 P A B run:b C D0 P A B", "a=6 | b=0", true},
		{"D without C or submission", "P A B D6 P A B run:b C D0 P A B", "b=0", true},
		{"N while open", "P A B run:a C N0 P A B run:b C D1 P A B", "a=? | b=1", true},
		{"duplicated C", "P A B run:a C C D3 P A B", "a=3", true},
		{"no status in D", "P A B run:a C D P A B run:b C D1 P A B", "a=? | b=1", true},
		{"prompt without marks (theme)", "P A B run:a C D0 P run:b C D1 P", "a=0 | b=1", false},
		{"running", "P A B run:a C out:x", "a=…", false},
		{"re-prompt without the hook (failed history expansion)", "D0 P R1 A B run:echo_hi!x out:event_not_found R2 A B", "echo hi!x=?", true},
		{"redrawn prompt repeats R", "D0 P R3 A B run:x R3 A B C D0 P A B", "x=0", true},
		{"re-prompt while open (hooks gone)", "P A B run:a C out:x R4 A B run:b C D1 P A B", "a=? | b=1", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := machine()
			feed(s, c.steps)
			var got []string
			for _, b := range s.Blocks() {
				got = append(got, blockLine(b))
				if b.State == BlockDone && b.ExitCode != nil && b.Note != "" {
					t.Errorf("block %d has an exit code and a note %q", b.N, b.Note)
				}
			}
			if g := strings.Join(got, " | "); g != c.want {
				t.Errorf("blocks after %q:\n got  %s\n want %s", c.steps, g, c.want)
			}
			if idle := s.Info().State == StateIdle; idle != c.idle {
				t.Errorf("idle = %v, want %v (state %s)", idle, c.idle, s.Info().State)
			}
		})
	}
}

func TestNothingToRun(t *testing.T) {
	for cmd, want := range map[string]bool{
		"# x": true, "  #x\n\n# y": true, "\\": true, "fi": false, "# x\necho": false, "echo # x": false,
	} {
		if got := nothingToRun(cmd); got != want {
			t.Errorf("nothingToRun(%q) = %v", cmd, got)
		}
	}
}

// FuzzBlockMachine feeds arbitrary mark sequences: whatever comes, a block never has
// both an exit code and a note, a done block without a code says why, blocks are
// numbered in order and at most one is open per kind.
func FuzzBlockMachine(f *testing.F) {
	f.Add("PABrCoDPAB")
	f.Add("PABrCoAB7PABrN2P")
	f.Add("PABrCCDDPArRRoNP")
	f.Fuzz(func(t *testing.T, steps string) {
		if len(steps) > 200 {
			return
		}
		var seq []string
		for i, c := range steps {
			switch c {
			case 'A', 'B', 'C', 'P':
				seq = append(seq, string(c))
			case 'D', 'N':
				seq = append(seq, string(c)+strconv.Itoa(i%4))
			case 'R':
				seq = append(seq, "R"+strconv.Itoa(i%3+1))
			case 'r':
				seq = append(seq, "run:c"+strconv.Itoa(i))
			case 'o':
				seq = append(seq, "out:x")
			default:
				seq = append(seq, "D")
			}
		}
		if len(seq) == 0 {
			return
		}
		s := machine()
		feed(s, strings.Join(seq, " "))
		open := 0
		for i, b := range s.Blocks() {
			if b.N != i+1 {
				t.Fatalf("block %d numbered %d", i+1, b.N)
			}
			if b.ExitCode != nil && b.Note != "" {
				t.Fatalf("block %d has code %d and note %q", b.N, *b.ExitCode, b.Note)
			}
			if b.State == BlockDone && b.ExitCode == nil && b.Note == "" {
				t.Fatalf("block %d done without a code or a note (steps %q)", b.N, seq)
			}
			if b.State == BlockRunning {
				open++
			}
			if b.End < b.Start {
				t.Fatalf("block %d ends before it starts", b.N)
			}
		}
		if open > 2 { // the shell's block and a submitted one at most
			t.Fatalf("%d blocks open after %q", open, seq)
		}
	})
}
