package proc

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func run(t *testing.T, spec Spec) (*Proc, Exit) {
	t.Helper()
	if spec.HeadBytes == 0 {
		spec.HeadBytes, spec.TailBytes = 96<<10, 1<<20
	}
	if spec.Env == nil {
		spec.Env = Environ(os.Environ(), nil)
	}
	p, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ex, ok := p.Wait(ctx)
	if !ok {
		p.Kill()
		t.Fatalf("%v did not end", spec.Argv)
	}
	return p, ex
}

func cut(p *Proc, stream string) string {
	b, _, _ := p.Cut(stream, 1<<20)
	return string(b)
}

// TestStreamsApart: a program writing stdout and stderr in turns gets each back
// whole and apart; the environment says no terminal is there; stdin is /dev/null.
func TestStreamsApart(t *testing.T) {
	script := `for i in $(seq 1 500); do echo "out $i"; echo "err $i" >&2; done; echo "$TERM $NO_COLOR $PAGER"; cat; echo end`
	p, ex := run(t, Spec{Argv: []string{"sh", "-c", script}})
	if ex.Code != 0 || ex.Signal != "" {
		t.Fatalf("exit %+v", ex)
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 500; i++ {
		wantOut.WriteString("out " + itoa(i) + "\n")
		wantErr.WriteString("err " + itoa(i) + "\n")
	}
	wantOut.WriteString("dumb 1 cat\nend\n")
	if got := cut(p, api.StreamStdout); got != wantOut.String() {
		t.Errorf("stdout (%d bytes) is not the program's stdout (%d bytes); tail %q", len(got), wantOut.Len(), tail(got))
	}
	if got := cut(p, api.StreamStderr); got != wantErr.String() {
		t.Errorf("stderr (%d bytes) is not the program's stderr; tail %q", len(got), tail(got))
	}
}

func tail(s string) string { return s[max(0, len(s)-80):] }

func itoa(i int) string {
	b := []byte{}
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestExitAndSignals: exit codes come back as they are; a process killed by a
// signal is 128+N with the signal named.
func TestExitAndSignals(t *testing.T) {
	for _, c := range []struct {
		script string
		code   int
		signal string
	}{
		{"exit 0", 0, ""},
		{"exit 1", 1, ""},
		{"exit 137", 137, ""},
		{"kill -TERM $$", 143, "SIGTERM"},
		{"kill -KILL $$", 137, "SIGKILL"},
	} {
		_, ex := run(t, Spec{Argv: []string{"sh", "-c", c.script}})
		if ex.Code != c.code || ex.Signal != c.signal {
			t.Errorf("%q: exit %d signal %q, want %d %q", c.script, ex.Code, ex.Signal, c.code, c.signal)
		}
	}
}

// TestStdin: given stdin reaches the process.
func TestStdin(t *testing.T) {
	p, _ := run(t, Spec{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("hello\n")})
	if got := cut(p, api.StreamStdout); got != "HELLO\n" {
		t.Errorf("stdout %q", got)
	}
}

// TestLargeOutputCut: 20 MB of output is kept as head and tail, the rest counted.
func TestLargeOutputCut(t *testing.T) {
	// 20 MiB of numbered lines: the first and the last are known.
	p, ex := run(t, Spec{Argv: []string{"sh", "-c", "yes 0123456789abcdef | head -c 20971520; echo LAST"}})
	if ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	text, omitted, length := p.Cut(api.StreamStdout, 64<<10)
	if length != 20971520+5 {
		t.Fatalf("length %d", length)
	}
	if !bytes.HasPrefix(text, []byte("0123456789abcdef\n")) || !bytes.HasSuffix(text, []byte("LAST\n")) {
		t.Errorf("cut text does not keep head and tail: %q … %q", text[:40], text[len(text)-40:])
	}
	kept := int64(len(text)) - int64(len("\n[… "+itoa(int(omitted))+" bytes omitted …]\n"))
	if omitted <= 0 || kept+omitted != length || kept != 64<<10 {
		t.Errorf("omitted %d kept %d, length %d: the counts do not add up", omitted, kept, length)
	}
}

// TestKillGroup: Kill ends the process and what it started in its group, and
// the output written before is kept.
func TestKillGroup(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Spec{Argv: []string{"sh", "-c", "echo started; sleep 30 & echo $! > " + dir + "/pid; wait"},
		Env: Environ(os.Environ(), nil), HeadBytes: 1024, TailBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.stdout.Len() == 0 || fileEmpty(dir+"/pid") {
		if time.Now().After(deadline) {
			t.Fatal("no output")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, ok := p.Wait(ctx)
	if !ok || !ex.Killed || ex.Signal != "SIGKILL" {
		t.Fatalf("after Kill: %+v %v", ex, ok)
	}
	if got := cut(p, api.StreamStdout); got != "started\n" {
		t.Errorf("stdout %q", got)
	}
	// SIGKILL is delivered when the sleep next runs: on a loaded machine that
	// may be a moment after Wait returned. It must be gone (or a zombie) soon.
	b, err := os.ReadFile(dir + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group's sleep %s still runs 5 s after Kill: %s", pid, stat)
		}
	}
}

func fileEmpty(p string) bool {
	b, _ := os.ReadFile(p)
	return len(bytes.TrimSpace(b)) == 0
}

// TestEnvironNoSecrets: the node's secrets never reach an exec's environment.
func TestEnvironNoSecrets(t *testing.T) {
	env := Environ([]string{"FLEETMUX_TOKEN=s3cret", "NATS_CREDS=/x", "HOME=/h", "TERM=xterm"}, map[string]string{"A": "b"})
	got := strings.Join(env, " ")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "NATS_CREDS") || !strings.Contains(got, "TERM=dumb") || !strings.Contains(got, "A=b") {
		t.Errorf("env %v", env)
	}
}

// TestReadAt: offsets address the whole stream; bytes the ring dropped are
// skipped with the offset saying so.
func TestReadAt(t *testing.T) {
	c := newCapture(4, 8)
	c.Write([]byte("abcdefghijklmnop")) // head abcd, ring ijklmnop
	if d, off, end, oldest := c.ReadAt(0, 100); string(d) != "abcd" || off != 0 || end != 16 || oldest != 8 {
		t.Errorf("ReadAt(0) = %q %d %d %d", d, off, end, oldest)
	}
	if d, off, _, _ := c.ReadAt(4, 100); string(d) != "ijklmnop" || off != 8 {
		t.Errorf("ReadAt(4) = %q %d", d, off)
	}
	if d, off, _, _ := c.ReadAt(14, 100); string(d) != "op" || off != 14 {
		t.Errorf("ReadAt(14) = %q %d", d, off)
	}
	if d, omitted := c.Cut(6); string(d) != "abc\n[… 10 bytes omitted …]\nnop" || omitted != 10 {
		t.Errorf("Cut(6) = %q %d", d, omitted)
	}
	if d, omitted := c.Cut(100); string(d) != "abcd\n[… 4 bytes omitted …]\nijklmnop" || omitted != 4 {
		t.Errorf("Cut(100) = %q %d", d, omitted)
	}
}

// FuzzCut: whatever is written, Cut keeps head and tail of it within the
// budget (plus its marker) and counts the rest.
func FuzzCut(f *testing.F) {
	f.Add([]byte("hello world"), 4, 8, 6)
	f.Fuzz(func(t *testing.T, data []byte, head, tailSize, budget int) {
		head, tailSize, budget = head%64+1, tailSize%64+1, budget%128+1
		if head < 0 || tailSize < 0 || budget <= 0 {
			return
		}
		c := newCapture(head, tailSize)
		for i := 0; i < len(data); i += 7 {
			c.Write(data[i:min(len(data), i+7)])
		}
		text, omitted := c.Cut(budget)
		if omitted == 0 {
			if !bytes.Equal(text, data) {
				t.Fatalf("nothing omitted but %q != %q", text, data)
			}
			return
		}
		i := bytes.Index(text, []byte("\n[… "))
		if i < 0 || !bytes.HasPrefix(data, text[:i]) {
			t.Fatalf("head of %q is not data's", text)
		}
		j := bytes.Index(text, []byte(" bytes omitted …]\n")) + len(" bytes omitted …]\n")
		if !bytes.HasSuffix(data, text[j:]) || int64(i+len(text)-j)+omitted != int64(len(data)) {
			t.Fatalf("tail %q of %q, omitted %d", text[j:], data, omitted)
		}
	})
}

// TestStatusReportIsTheEnd: a process that reports its program's end on the
// status pipe has ended then, with the reported code or signal, though it has
// not exited itself (it is killed and reaped after); without a report its own
// wait status counts.
func TestStatusReportIsTheEnd(t *testing.T) {
	for _, c := range []struct {
		report string
		code   int
		signal string
	}{{"x7", 7, ""}, {"s15", 128 + 15, "SIGTERM"}, {"", 5, ""}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		script := "exit 5"
		if c.report != "" {
			script = "echo out; echo " + c.report + " >&3; exec 3>&-; exec sleep 60"
		}
		start := time.Now()
		p, ex := run(t, Spec{Argv: []string{"sh", "-c", script}, ExtraFiles: []*os.File{w}, Status: r})
		w.Close()
		if ex.Code != c.code || ex.Signal != c.signal || ex.Killed {
			t.Errorf("report %q: %+v", c.report, ex)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("report %q: the end came after %v", c.report, d)
		}
		if c.report != "" && cut(p, api.StreamStdout) != "out\n" {
			t.Errorf("stdout %q", cut(p, api.StreamStdout))
		}
		p.Close() // the process itself is reaped (the group was killed at the report)
	}
}

// FuzzParseStatus: a wrapper's report of how its program ended ("x" and the
// exit code or "s" and the signal, 0 to 255, and a newline) parses to what it
// says; anything else is no report (nil), never a made-up exit.
func FuzzParseStatus(f *testing.F) {
	for _, c := range []struct {
		in   string
		code int // -1: no report
	}{{"x0\n", 0}, {"x3\n", 3}, {"s9\n", 137}, {"s15\n", 143}, {"x256\n", -1}, {"x-1\n", -1}, {"x3", -1}, {"q1\n", -1}, {"s\n", -1}, {"", -1}} {
		ex := parseStatus([]byte(c.in))
		if code := -1; ex != nil && ex.Code != c.code || ex == nil && c.code != code {
			f.Fatalf("parseStatus(%q) = %+v, want code %d", c.in, ex, c.code)
		}
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ex := parseStatus(b)
		if ex == nil {
			return
		}
		msg, ok := strings.CutSuffix(string(b), "\n")
		if !ok || len(msg) < 2 {
			t.Fatalf("%q is not a report: %+v", b, ex)
		}
		n, err := strconv.Atoi(msg[1:])
		switch {
		case err != nil || n < 0 || n > 255:
			t.Fatalf("%q: %+v from a bad number", b, ex)
		case msg[0] == 'x' && (ex.Code != n || ex.Signal != ""):
			t.Fatalf("%q: %+v, want exit %d", b, ex, n)
		case msg[0] == 's' && (ex.Code != 128+n || ex.Signal == ""):
			t.Fatalf("%q: %+v, want signal %d", b, ex, n)
		case msg[0] != 'x' && msg[0] != 's':
			t.Fatalf("%q: %+v from no kind", b, ex)
		}
	})
}
