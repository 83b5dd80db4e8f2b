package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func redactors(t testing.TB, pats ...string) []Redact {
	t.Helper()
	var out []Redact
	for i := 0; i+1 < len(pats); i += 2 {
		r, err := NewRedact(pats[i], pats[i+1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// redactChunks writes in to a new redactor in the given chunks and returns all output.
func redactChunks(rs []Redact, chunks ...[]byte) []byte {
	r := NewRedactor(rs)
	bound := 1
	for _, p := range rs {
		bound = max(bound, p.max)
	}
	var out []byte
	for _, c := range chunks {
		out = append(out, r.Write(c)...)
		// a partial match is shorter than the longest match; a cut rune adds at most
		// 3, control sequences inside it up to MaxHeld
		if r.Held() >= bound+utf8.UTFMax-1 && (!bytes.Contains(r.held, []byte{0x1b}) || r.Held() > MaxHeld) {
			panic(fmt.Sprintf("held %d bytes, bound %d", r.Held(), bound))
		}
	}
	return append(out, r.Flush()...)
}

// reference redacts in at once with one regexp of all patterns as alternatives
// over the text a terminal shows, the semantics Redactor promises (leftmost, then
// the first pattern; control sequences inside a match kept after its marker).
func reference(rs []Redact, in []byte) []byte {
	var alts []string
	for _, p := range rs {
		alts = append(alts, "("+p.re.String()+")")
	}
	re := regexp.MustCompile(strings.Join(alts, "|"))
	pr := project(in, true, nil)
	var out []byte
	pos := 0
	for _, m := range re.FindAllSubmatchIndex(pr.vis, -1) {
		out = append(out, in[pos:pr.orig(m[0])]...)
		for g := range rs {
			if m[2+2*g] >= 0 {
				out = append(out, "[REDACTED:"+rs[g].Name+"]"...)
				break
			}
		}
		out = pr.inside(out, in, m[0], m[1])
		pos = pr.orig(m[1]-1) + 1
	}
	return append(out, in[pos:]...)
}

const fakeKey = "AKIAIOSFODNN7EXAMPLE"

func TestRedact(t *testing.T) {
	rs := redactors(t, "aws-key", `AKIA[0-9A-Z]{16}`, "private-key", `-----BEGIN [A-Z ]*PRIVATE KEY-----`, "token", `tok_[a-z]+`)
	tests := []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"key=" + fakeKey + "\n", "key=[REDACTED:aws-key]\n"},
		{fakeKey + fakeKey, "[REDACTED:aws-key][REDACTED:aws-key]"},
		{"AKIAshort", "AKIAshort"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMII", "[REDACTED:private-key]\nMII"},
		{"a tok_abc b tok_xyz", "a [REDACTED:token] b [REDACTED:token]"},
		{"tok_" + strings.Repeat("a", 300), "[REDACTED:token]" + strings.Repeat("a", 300-RepeatCap)},
		// control sequences inside a secret are skipped, and kept after the marker
		{"\x1b[01;31mAKIA\x1b[m\x1b[KIOSFODNN7EXAMPLE\n", "\x1b[01;31m[REDACTED:aws-key]\x1b[m\x1b[K\n"},
		{"\x1b[27mA\x1b[27mK\x1b[27mIAIOSFODNN7EXAMPLE", "\x1b[27m[REDACTED:aws-key]\x1b[27m\x1b[27m"},
		{"AKIA\x1b(BIOSFODNN7EXAMPLE", "[REDACTED:aws-key]\x1b(B"},
		// a title (OSC) is text: its ESC and ] are in the way of nothing
		{"\x1b]0;" + fakeKey + "\x07", "\x1b]0;[REDACTED:aws-key]\x07"},
		// a lone ESC, or one in a sequence too long to be one, is text
		{"AKIA\x1bIOSFODNN7EXAMPLE", "AKIA\x1bIOSFODNN7EXAMPLE"},
		{"AKIA\x1b[" + strings.Repeat("1", 70) + "mIOSFODNN7EXAMPLE", "AKIA\x1b[" + strings.Repeat("1", 70) + "mIOSFODNN7EXAMPLE"},
	}
	for _, tt := range tests {
		if got := string(redactChunks(rs, []byte(tt.in))); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := string(reference(rs, []byte(tt.in))); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRedactSplit prints a key split in two writes at every point, and in one byte
// writes, with text around it.
func TestRedactSplit(t *testing.T) {
	rs := redactors(t, "aws-key", `AKIA[0-9A-Z]{16}`, "private-key", `-----BEGIN [A-Z ]*PRIVATE KEY-----`)
	for _, secret := range []string{fakeKey, "-----BEGIN OPENSSH PRIVATE KEY-----"} {
		in := "$ cat creds\nid = " + secret + "\n$ "
		want := string(redactChunks(rs, []byte(in)))
		if strings.Contains(want, secret) || !strings.Contains(want, "[REDACTED:") {
			t.Fatalf("one write gives %q", want)
		}
		for i := 0; i <= len(in); i++ {
			if got := string(redactChunks(rs, []byte(in[:i]), []byte(in[i:]))); got != want {
				t.Errorf("split at %d: %q, want %q", i, got, want)
			}
		}
		var bytewise [][]byte
		for i := range len(in) {
			bytewise = append(bytewise, []byte{in[i]})
		}
		if got := string(redactChunks(rs, bytewise...)); got != want {
			t.Errorf("byte by byte: %q, want %q", got, want)
		}
	}
}

// TestRedactReleases checks that Write holds back only a tail where a secret may
// still start, so a prompt or the end of any other output is not delayed.
func TestRedactReleases(t *testing.T) {
	rs := redactors(t, "aws-key", `AKIA[0-9A-Z]{16}`, "token", `tok_[a-z]+`, "pw", `password=[^ \n]{1,64}`)
	tests := []struct{ in, out, held string }{
		{strings.Repeat("x", 1000), strings.Repeat("x", 1000), ""},
		{"build ok\nuser@host:~$ ", "build ok\nuser@host:~$ ", ""},
		{"id = AKIA", "id = ", "AKIA"},
		{"id = AK", "id = ", "AK"},
		{"id = AKIB", "id = AKIB", ""},
		{"AKIAIOSFODNN7EXAMPL", "", "AKIAIOSFODNN7EXAMPL"},
		{"AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws-key]", ""}, // complete, and cannot grow
		{"x tok_abc", "x ", "tok_abc"},                     // complete, but may grow
		{"x tok_abc y", "x [REDACTED:token] y", ""},        // grown no further
		{"password=hunter2", "", "password=hunter2"},       // may grow
		{"AKIAtok_ab", "AKIA", "tok_ab"},                   // AKIA is dead at t
		{"caf\xc3", "caf", "\xc3"},                         // a rune cut in two
		{"AKIA" + strings.Repeat("A", 15) + "\xc3", "", "AKIA" + strings.Repeat("A", 15) + "\xc3"},
		{"ls\x1b[", "ls", "\x1b["},               // an unfinished sequence
		{"ls\x1b[0m", "ls\x1b[0m", ""},           // a finished one
		{"id=AKIA\x1b[0m", "id=", "AKIA\x1b[0m"}, // a sequence inside a partial match
		{"\x1b]0;tok_a", "\x1b]0;", "tok_a"},
	}
	for _, tt := range tests {
		r := NewRedactor(rs)
		out := string(r.Write([]byte(tt.in)))
		if out != tt.out || string(r.held) != tt.held || r.Held() != len(tt.held) {
			t.Errorf("Write(%q) = %q holding %q, want %q holding %q", tt.in, out, r.held, tt.out, tt.held)
		}
		if rest := string(r.Flush()); out+rest != string(reference(rs, []byte(tt.in))) {
			t.Errorf("Write(%q) then Flush = %q, want %q", tt.in, out+rest, reference(rs, []byte(tt.in)))
		}
		if r.Held() != 0 {
			t.Errorf("Flush left %d bytes held", r.Held())
		}
	}
	// colour codes without end cannot make it hold more than MaxHeld
	r := NewRedactor(rs)
	out := r.Write([]byte("AKIA"))
	for range 5000 {
		out = append(out, r.Write([]byte("\x1b[0m"))...)
		if r.Held() > MaxHeld {
			t.Fatalf("held %d bytes", r.Held())
		}
	}
	if len(out) < 4+5000*4-MaxHeld {
		t.Fatalf("released %d bytes", len(out))
	}
	in := []byte(strings.Repeat("y", 100))
	if got := NewRedactor(nil).Write(in); !bytes.Equal(got, in) || &got[0] == &in[0] {
		t.Fatal("no patterns: not a copy of the stream")
	}
}

func TestRedactText(t *testing.T) {
	rs := redactors(t, "aws-key", `AKIA[0-9A-Z]{16}`)
	r := NewRedactor(rs)
	_ = r.Write([]byte("AKIA")) // Text leaves the stream alone
	if got := r.Text("echo " + fakeKey); got != "echo [REDACTED:aws-key]" {
		t.Errorf("Text = %q", got)
	}
	if got := r.Text("echo AKIA"); got != "echo AKIA" {
		t.Errorf("Text of a partial key = %q", got)
	}
	if got := string(r.Write([]byte("IOSFODNN7EXAMPLE"))); got != "[REDACTED:aws-key]" {
		t.Errorf("the stream after Text: %q", got)
	}
	var p *Policy
	if p.RedactText(fakeKey) != fakeKey {
		t.Error("nil policy redacted")
	}
	if (&Policy{Redacts: rs}).RedactText("k="+fakeKey) != "k=[REDACTED:aws-key]" {
		t.Error("policy RedactText")
	}
}

// FuzzRedact checks the streaming redactor against the one-regexp reference: any
// chunking gives the reference's output, no secret survives, and a newline (which
// no pattern here can read or start with) leaves nothing held back.
func FuzzRedact(f *testing.F) {
	f.Add([]byte("id = "+fakeKey+" and tok_abc"), uint8(3), uint8(7))
	f.Add([]byte("AKIAAKIA0123456789ABCDEFGH"), uint8(1), uint8(1))
	f.Add([]byte("\xf0\x9f\x98\x80sk-ABCDEFGHIJKLMNOPQRST\xe2\x82"), uint8(2), uint8(5))
	f.Add([]byte("pw=\xe2\x82\xac\xe2\x82\xacab"), uint8(4), uint8(1))
	f.Add([]byte("\xe2\x82AKIA\xc3\xa9KIAIOSFODNN7EXAMPLEE"), uint8(1), uint8(2))
	f.Add([]byte("\x1b[01;31mAKIA\x1b[m\x1b[KIOSFODNN7EXAMPLE\n\x1b[27mt\x1b[27mok_x\x1b(B\x1b"), uint8(2), uint8(3))
	rs := redactors(f, "aws-key", `AKIA[0-9A-Z]{16}`, "token", `tok_[a-z]+`, "sk", `sk-[A-Za-z0-9]{20}`,
		"any", `pw=.{4}`, "fold", `(?i)secret:[a-z]{3,5}`, "uni", `é[0-9]{2}`)
	survivors := regexp.MustCompile(`AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9]{20}`)
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		if len(in) > MaxHeld/2 {
			return // past MaxHeld of control sequences, chunks may decide differently
		}
		want := reference(rs, in)
		if got := redactChunks(rs, in); !bytes.Equal(got, want) {
			t.Fatalf("at once:\n got %q\nwant %q", got, want)
		}
		// chunk sizes alternate between a and b (at least 1)
		var chunks [][]byte
		rest, sizes := in, []int{int(a)%64 + 1, int(b)%64 + 1}
		for i := 0; len(rest) > 0; i++ {
			n := min(sizes[i%2], len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		if got := redactChunks(rs, chunks...); !bytes.Equal(got, want) {
			t.Fatalf("in chunks %v:\n got %q\nwant %q", sizes, got, want)
		}
		if m := survivors.Find(project(want, true, nil).vis); m != nil {
			t.Fatalf("secret %q survived in %q", m, want)
		}
		r := NewRedactor(rs)
		var out []byte
		for _, c := range chunks {
			out = append(out, r.Write(c)...)
		}
		out = append(out, r.Write([]byte("\n"))...)
		if r.Held() != 0 {
			t.Fatalf("%q then a newline: %d bytes held", in, r.Held())
		}
		if full := reference(rs, append(append([]byte(nil), in...), '\n')); !bytes.Equal(out, full) {
			t.Fatalf("with a newline:\n got %q\nwant %q", out, full)
		}
	})
}

// bench10 are the 10 patterns of the benchmarks (and of bench/'s guardrail report).
func bench10(b *testing.B) []Redact {
	return redactors(b,
		"aws-key", `AKIA[0-9A-Z]{16}`,
		"private-key", `-----BEGIN [A-Z ]*PRIVATE KEY-----`,
		"github", `gh[pousr]_[A-Za-z0-9]{36}`,
		"slack", `xox[baprs]-[0-9A-Za-z-]{10,48}`,
		"openai", `sk-[A-Za-z0-9]{20,64}`,
		"stripe", `sk_live_[0-9a-zA-Z]{24}`,
		"google", `AIza[0-9A-Za-z_-]{35}`,
		"jwt", `eyJ[A-Za-z0-9_-]{10,200}\.eyJ[A-Za-z0-9_-]{10,200}`,
		"password", `password=[^ \n]{1,64}`,
		"token", `tok_[a-z0-9]{16}`,
	)
}

func benchRedact(b *testing.B, rs []Redact, line string, size int) {
	chunk := bytes.Repeat([]byte(line), size/len(line))
	chunk = append(chunk, "password=hunter2 AKIAIOSFODNN7EXAMPLE\n"...)
	r := NewRedactor(rs)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Write(chunk)
	}
}

const benchLine = "2026-11-24T00:00:00Z INFO build step 12/40: compiling package github.com/x/y (cached) ok\n"

// BenchmarkRedact10: 4 KiB reads of log lines, a key and a password in each.
func BenchmarkRedact10(b *testing.B) { benchRedact(b, bench10(b), benchLine, 4096) }

// BenchmarkRedact10Big: the same in 32 KiB reads (the session's read size).
func BenchmarkRedact10Big(b *testing.B) { benchRedact(b, bench10(b), benchLine, 32<<10) }

// BenchmarkRedact10Colors: coloured log lines (control sequences to skip).
func BenchmarkRedact10Colors(b *testing.B) {
	benchRedact(b, bench10(b), "\x1b[2m2026-11-24T00:00:00Z\x1b[0m \x1b[32mINFO\x1b[0m build step 12/40: compiling \x1b[1mgithub.com/x/y\x1b[0m ok\n", 4096)
}

// BenchmarkRedactNone: no patterns (a copy).
func BenchmarkRedactNone(b *testing.B) { benchRedact(b, nil, benchLine, 4096) }
