package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
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
	var out []byte
	for _, c := range chunks {
		out = append(out, r.Write(c)...)
		if len(r.held) >= max(r.max, 1) {
			panic(fmt.Sprintf("held %d bytes, bound %d", len(r.held), r.max))
		}
	}
	return append(out, r.Flush()...)
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
	}
	for _, tt := range tests {
		if got := string(redactChunks(rs, []byte(tt.in))); got != tt.want {
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

// TestRedactReleases checks that Write holds back less than the longest match, so
// output keeps flowing.
func TestRedactReleases(t *testing.T) {
	rs := redactors(t, "aws-key", `AKIA[0-9A-Z]{16}`)
	r := NewRedactor(rs)
	in := bytes.Repeat([]byte("x"), 1000)
	out := r.Write(in)
	if len(out) != len(in)-(rs[0].max-1) {
		t.Fatalf("released %d of %d bytes, want all but %d", len(out), len(in), rs[0].max-1)
	}
	if rest := r.Flush(); len(out)+len(rest) != len(in) {
		t.Fatalf("flush released %d", len(rest))
	}
	if got := NewRedactor(nil).Write(in); !bytes.Equal(got, in) {
		t.Fatal("no patterns changed the stream")
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte("id = "+fakeKey+" and tok_abc"), uint8(3), uint8(7))
	f.Add([]byte("AKIAAKIA0123456789ABCDEFGH"), uint8(1), uint8(1))
	f.Add([]byte("\xf0\x9f\x98\x80sk-ABCDEFGHIJKLMNOPQRST\xe2\x82"), uint8(2), uint8(5))
	rs := redactors(f, "aws-key", `AKIA[0-9A-Z]{16}`, "token", `tok_[a-z]+`, "sk", `sk-[A-Za-z0-9]{20}`, "any", `pw=.{4}`)
	survivors := regexp.MustCompile(`AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9]{20}`)
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		want := redactChunks(rs, in)
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
		if m := survivors.Find(want); m != nil {
			t.Fatalf("secret %q survived in %q", m, want)
		}
	})
}

func BenchmarkRedact10(b *testing.B) {
	rs := redactors(b,
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
	line := []byte("2026-11-24T00:00:00Z INFO build step 12/40: compiling package github.com/x/y (cached) ok\n")
	chunk := bytes.Repeat(line, 4096/len(line))
	chunk = append(chunk, "password=hunter2 AKIAIOSFODNN7EXAMPLE\n"...)
	r := NewRedactor(rs)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Write(chunk)
	}
}
