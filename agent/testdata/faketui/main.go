// Command faketui draws the screens of a coding-agent CLI (-driver claude, codex,
// opencode, gemini, aider) as the tests of package agent need them, driven only
// by its input; it fires no hooks, so only the screen tells its state.
//
//	boot   "Starting…" for -boot, then (with -trust) a folder-trust dialog that
//	       Enter answers, then the ready screen
//	ready  a prompt line and Enter: working for -busy; a prompt containing "perm"
//	       then shows the permission dialog, where "1", "y" or Enter allow (working
//	       for -busy, then ready) and Esc refuses (ready); "/exit" exits with code
//	       0, "/fail" with code 3; Esc or C-c while working interrupt it (ready;
//	       claude puts the prompt back into its composer, and hides its footer's
//	       hint while the composer has text, as Claude Code does); C-u empties
//	       the composer
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/charmbracelet/x/term"
)

type screens struct {
	ready, busy, dialog []string
	// hint is a line of ready hidden while the composer has text; restore: an
	// interrupted prompt goes back into the composer.
	hint    string
	restore bool
}

var rule = strings.Repeat("─", 60)

var drivers = map[string]screens{
	"claude": { // Claude Code 2.1
		ready:   []string{"", rule, "❯ %s", rule, "  ? for shortcuts · ← for agents"},
		busy:    []string{"✻ Working… (2s · ↓ 4 tokens)", "", rule, "❯ ", rule, "  esc to interrupt · ← for agents"},
		dialog:  []string{rule, " Bash command", "   touch marker", " Do you want to proceed?", " ❯ 1. Yes", "   2. Yes, and always allow", "   3. No", "", " Esc to cancel · Tab to amend"},
		hint:    "  ? for shortcuts · ← for agents",
		restore: true,
	},
	"codex": {
		ready:  []string{"▌ %s", "⏎ send   ⌃J newline   ⌃T transcript   ⌃C quit"},
		busy:   []string{"• Working (3s • Esc to interrupt)", "▌", "⏎ send   ⌃J newline   ⌃T transcript   ⌃C quit"},
		dialog: []string{"Would you like to run the following command?", "$ touch marker", "› 1. Yes, proceed", "  2. No, and tell Codex what to do differently"},
	},
	"opencode": {
		ready:  []string{"┃ > %s", "enter send   ctrl+p commands"},
		busy:   []string{"⠋ Working...   esc interrupt", "┃ >", "enter send   ctrl+p commands"},
		dialog: []string{"Permission required", "bash: touch marker", "Allow once   Allow always   Reject"},
	},
	"gemini": {
		ready:  []string{">   Type your message or @path/to/file %s"},
		busy:   []string{"⠏ Thinking... (esc to cancel, 2s)", ">   Type your message or @path/to/file"},
		dialog: []string{"Shell touch marker", "Allow execution of: 'touch'?", "● 1. Yes, allow once", "  2. Yes, allow always", "  3. No"},
	},
	"aider": {
		ready:  []string{"Aider v0.86.1", "Model: fake", "> %s"},
		busy:   []string{"Aider v0.86.1", "Model: fake", "Waiting for LLM response"},
		dialog: []string{"Aider v0.86.1", "Model: fake", "touch marker", "Run shell command? (Y)es/(N)o [Yes]:"},
	},
}

func main() {
	driver := flag.String("driver", "claude", "whose screens to draw")
	boot := flag.Duration("boot", 300*time.Millisecond, "how long it boots")
	busy := flag.Duration("busy", 1200*time.Millisecond, "how long a prompt works")
	trust := flag.Bool("trust", false, "ask to trust the folder first")
	flag.Parse()
	sc, ok := drivers[*driver]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown driver", *driver)
		os.Exit(2)
	}
	if st, err := term.MakeRaw(os.Stdin.Fd()); err == nil {
		defer term.Restore(os.Stdin.Fd(), st)
	}
	keys := make(chan byte, 256)
	go func() {
		b := make([]byte, 256)
		for {
			n, err := os.Stdin.Read(b)
			for _, c := range b[:n] {
				keys <- c
			}
			if err != nil {
				close(keys)
				return
			}
		}
	}()
	draw := func(lines []string, line string) {
		var b strings.Builder
		b.WriteString("\x1b[?1049h\x1b[H\x1b[2J")
		for i, l := range lines {
			if i > 0 {
				b.WriteString("\r\n")
			}
			if line != "" && l == sc.hint {
				continue
			}
			if strings.Contains(l, "%s") {
				l = fmt.Sprintf(l, line)
			}
			b.WriteString(l)
		}
		os.Stdout.WriteString(b.String())
	}
	// wait returns the next key, or 0 after d (d 0: no limit); ok false at EOF.
	wait := func(d time.Duration) (byte, bool) {
		var t <-chan time.Time
		if d > 0 {
			t = time.After(d)
		}
		select {
		case c, ok := <-keys:
			return c, ok
		case <-t:
			return 0, true
		}
	}
	draw([]string{"Starting…"}, "")
	time.Sleep(*boot)
	if *trust {
		draw([]string{"Do you trust the files in this folder?", "", "❯ 1. Yes, proceed", "  2. No, exit"}, "")
		for {
			c, ok := wait(0)
			if !ok {
				return
			}
			if c == '\r' {
				break
			}
		}
	}
	// work shows the busy screen for -busy; an Esc or C-c ends it early (it
	// reports whether one did).
	work := func() bool {
		draw(sc.busy, "")
		deadline := time.Now().Add(*busy)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return false
			}
			c, ok := wait(left)
			if !ok {
				os.Exit(0)
			}
			if c == 0x1b || c == 0x03 {
				return true
			}
		}
	}
	var line []byte
	for {
		draw(sc.ready, string(line))
		c, ok := wait(0)
		if !ok {
			return
		}
		switch {
		case c == '\r' || c == '\n':
			prompt := string(line)
			line = line[:0]
			switch {
			case prompt == "/exit":
				os.Exit(0)
			case prompt == "/fail":
				os.Exit(3)
			case strings.TrimSpace(prompt) == "":
				continue
			}
			if work() && sc.restore {
				line = append(line, prompt...)
				continue
			}
			if strings.Contains(prompt, "perm") {
				draw(sc.dialog, "")
				for {
					c, ok := wait(0)
					if !ok {
						return
					}
					if c == '1' || c == 'y' || c == '\r' {
						work()
						break
					}
					if c == 0x1b {
						break
					}
				}
			}
		case c == 0x15:
			line = line[:0]
		case c == 0x7f || c == 0x08:
			if len(line) > 0 {
				line = line[:len(line)-1]
			}
		case c >= 0x20:
			line = append(line, c)
		}
	}
}
