package keeper

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/proc"
)

// TestChunkRotation: a stream of more than three chunks keeps chunk 0 and the
// newest two; its length, oldest offset, reads at any offset and cut follow
// from the files alone.
func TestChunkRotation(t *testing.T) {
	dir := t.TempDir()
	var all []byte
	for i := range 47 {
		all = append(all, 'a'+byte(i%26))
	}
	w := &chunkWriter{dir: dir, name: "stdout", chunk: 10}
	for _, k := range []int{3, 9, 1, 14, 20} { // pieces that straddle the chunks
		w.Write(all[:k])
		all = all[k:]
	}
	w.close()
	all = nil
	for i := range 47 {
		all = append(all, 'a'+byte(i%26))
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "stdout.0 stdout.3 stdout.4" {
		t.Fatalf("chunk files %v, want stdout.0 stdout.3 stdout.4", names)
	}
	s, err := openStream(dir, "stdout", 10)
	if err != nil || s.end != 47 || s.oldest != 30 {
		t.Fatalf("stream %+v %v: want end 47, oldest 30", s, err)
	}
	for _, c := range []struct {
		from      int64
		limit     int
		off, upTo int64
	}{
		{0, 100, 0, 10},   // the head only
		{4, 3, 4, 7},      // inside the head
		{10, 100, 30, 47}, // the gap is skipped
		{25, 8, 30, 38},
		{35, 100, 35, 47}, // across chunks 3 and 4
		{47, 10, 47, 47},
		{90, 10, 47, 47},
	} {
		data, off, err := s.readAt(c.from, c.limit)
		if err != nil || off != c.off || !bytes.Equal(data, all[c.off:c.upTo]) {
			t.Errorf("readAt(%d, %d) = %q at %d (%v), want %q at %d", c.from, c.limit, data, off, err, all[c.off:c.upTo], c.off)
		}
	}
	text, omitted, err := s.cut(100)
	want := string(all[:10]) + "\n[… 20 bytes omitted …]\n" + string(all[30:])
	if err != nil || string(text) != want || omitted != 20 {
		t.Errorf("cut(100) = %q, %d, %v; want %q, 20", text, omitted, err, want)
	}
	text, omitted, _ = s.cut(8)
	if want := string(all[:4]) + "\n[… 39 bytes omitted …]\n" + string(all[43:]); string(text) != want || omitted != 39 {
		t.Errorf("cut(8) = %q, %d; want %q", text, omitted, want)
	}
	// Two chunks: nothing dropped, the whole stream fits.
	d2 := t.TempDir()
	w = &chunkWriter{dir: d2, name: "stderr", chunk: 10}
	w.Write(all[:15])
	w.close()
	s, _ = openStream(d2, "stderr", 10)
	if text, omitted, _ := s.cut(100); s.end != 15 || s.oldest != 0 || string(text) != string(all[:15]) || omitted != 0 {
		t.Errorf("two chunks: %+v, cut %q %d", s, text, omitted)
	}
	if data, off, _ := s.readAt(10, 100); off != 10 || string(data) != string(all[10:15]) {
		t.Errorf("two chunks: readAt(10) = %q at %d", data, off)
	}
}

// start runs argv under a keeper in a fresh exec dir with chunk bytes chunks.
func start(t *testing.T, argv []string, chunk int64, redacts ...Pattern) *Exec {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "x1")
	x, err := Start("", dir, Spec{ID: "x1", Argv: argv, Shown: argv, Owner: "test:me", Env: []string{"PATH=" + os.Getenv("PATH")}, Chunk: chunk, Redacts: redacts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		x.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		x.Wait(ctx)
	})
	return x
}

func wait(t *testing.T, x *Exec) proc.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ex, ok := x.Wait(ctx)
	if !ok {
		t.Fatal("the exec did not end")
	}
	return ex
}

// TestExits: exit.json says how the program ended (0, 1, a signal, killed),
// read by the agent that started the keeper and by one that did not (Open, as
// after a restart), and the output is on disk apart.
func TestExits(t *testing.T) {
	for _, c := range []struct {
		script string
		code   int
		signal string
	}{
		{"echo out; echo err >&2; exit 0", 0, ""},
		{"echo out; echo err >&2; exit 1", 1, ""},
		{"echo out; echo err >&2; kill -TERM $$", 128 + 15, "SIGTERM"},
	} {
		x := start(t, []string{"/bin/sh", "-c", c.script}, 0)
		other, err := Open(x.Dir()) // an agent that is not the keeper's parent
		if err != nil {
			t.Fatal(err)
		}
		ex := wait(t, other)
		if ex.Code != c.code || ex.Signal != c.signal || ex.Killed {
			t.Errorf("%q: %+v, want code %d signal %q", c.script, ex, c.code, c.signal)
		}
		if ex2 := wait(t, x); ex2 != ex {
			t.Errorf("%q: the parent sees %+v, another agent %+v", c.script, ex2, ex)
		}
		out, _, n := x.Cut(api.StreamStdout, 100)
		errs, _, _ := x.Cut(api.StreamStderr, 100)
		if string(out) != "out\n" || n != 4 || string(errs) != "err\n" {
			t.Errorf("%q: stdout %q (%d), stderr %q", c.script, out, n, errs)
		}
		if x.Owner() != "test:me" || x.ID() != "x1" || x.Started().IsZero() {
			t.Errorf("meta: %+v", x.meta)
		}
	}
	// Killed: through the keeper, by an agent that is not its parent.
	x := start(t, []string{"/bin/sh", "-c", "echo ready; exec sleep 300"}, 0)
	other, err := Open(x.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ended := other.Exit(); ended {
		t.Fatal("running exec reads as ended")
	}
	other.Kill()
	if ex := wait(t, other); ex.Code != 137 || ex.Signal != "SIGKILL" || !ex.Killed {
		t.Errorf("killed: %+v", ex)
	}
}

// TestRedactedOnDisk: a secret the patterns redact never reaches the chunk
// files, though the program writes it in pieces (and across a chunk boundary).
func TestRedactedOnDisk(t *testing.T) {
	x := start(t, []string{"/bin/sh", "-c", `printf 'xxxxxAKIAABCD'; sleep 0.05; printf 'EFGHIJKLMNOP\n'; printf 'AKIA%s\n' ABCDEFGHIJKLMNOP >&2`}, 8,
		Pattern{Name: "aws-key", Pattern: "AKIA[0-9A-Z]{16}"})
	if ex := wait(t, x); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	ents, _ := os.ReadDir(x.Dir())
	chunks := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "stdout.") && !strings.HasPrefix(e.Name(), "stderr.") {
			continue // meta.json holds the argv as the agent gave it (redacted by the node)
		}
		chunks++
		b, _ := os.ReadFile(filepath.Join(x.Dir(), e.Name()))
		if bytes.Contains(b, []byte("EFGH")) || bytes.Contains(b, []byte("ABCD")) {
			t.Errorf("%s holds the secret: %q", e.Name(), b)
		}
	}
	if chunks < 4 {
		t.Errorf("%d chunk files", chunks)
	}
	out, _, _ := x.Cut(api.StreamStdout, 1000)
	errs, _, _ := x.Cut(api.StreamStderr, 1000)
	if string(out) != "xxxxx[REDACTED:aws-key]\n" || string(errs) != "[REDACTED:aws-key]\n" {
		t.Errorf("stdout %q stderr %q", out, errs)
	}
}

// TestNotStarted: a program that cannot start starts nothing and leaves no
// directory; a redact pattern that does not compile neither.
func TestNotStarted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x2")
	_, err := Start("", dir, Spec{ID: "x2", Argv: []string{"/no/such/program"}}, nil)
	if !errors.Is(err, proc.ErrStart) {
		t.Fatalf("no such program: %v, want ErrStart", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("its directory is left: %v", serr)
	}
	_, err = Start("", dir, Spec{ID: "x2", Argv: []string{"/bin/true"}, Redacts: []Pattern{{Name: "bad", Pattern: "("}}}, nil)
	if err == nil || errors.Is(err, proc.ErrStart) {
		t.Fatalf("bad pattern: %v", err)
	}
	if _, err := Start("", filepath.Join(t.TempDir(), "other"), Spec{ID: "x2", Argv: []string{"/bin/true"}}, nil); err == nil {
		t.Fatal("an id that is not the directory's name was accepted")
	}
}

// TestLost: a keeper killed with SIGKILL takes its program with it, and the
// exec ends as lost (code -1), for its parent and for a later agent.
func TestLost(t *testing.T) {
	x := start(t, []string{"/bin/sh", "-c", "exec sleep 300"}, 0)
	pgid := x.meta.Pgid
	if err := syscall.Kill(x.meta.Keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, x); ex.Code != -1 || ex.Signal != api.ExecLost {
		t.Fatalf("lost: %+v", ex)
	}
	y, err := Open(x.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if ex, ok := y.Exit(); !ok || ex.Signal != api.ExecLost {
		t.Fatalf("lost, read again: %+v %v", ex, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for syscall.Kill(-pgid, 0) == nil { // the program ends with its keeper (its parent-death signal)
		if ctx.Err() != nil {
			t.Fatal("the program outlived its keeper")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel, with a deadline
	}
}

// TestLostTakesTheRest: what the program started in the background, in its
// keeper's session, ends too once the keeper is found killed (the parent-death
// signal reaches only the program itself), not to run on unseen.
func TestLostTakesTheRest(t *testing.T) {
	x := start(t, []string{"/bin/sh", "-c", "sleep 300 & exec sleep 301"}, 0)
	sid := x.meta.Keeper
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left := func() []int { // the processes of the keeper's session but the keeper
		var pids []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil && pid != sid {
				if st, _ := procStat(pid); st.sid != sid {
					continue
				}
				if st, err := procStat(pid); err == nil && st.state != 'Z' {
					pids = append(pids, pid)
				}
			}
		}
		return pids
	}
	for len(left()) < 2 { // sh's sleep 300 and sleep 301
		if ctx.Err() != nil {
			t.Fatalf("the program's processes: %v", left())
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel, with a deadline
	}
	if err := syscall.Kill(sid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, x); ex.Signal != api.ExecLost {
		t.Fatalf("lost: %+v", ex)
	}
	for len(left()) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("processes %v outlived their keeper", left())
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel, with a deadline
	}
}

// TestKillLeftSparesOthers: the leftovers of a keeper are never looked for
// while its pid runs another process (reused), nor for a keeper of an
// earlier boot; otherwise they are killed.
func TestKillLeftSparesOthers(t *testing.T) {
	// A session whose leader (sh) is gone and whose sleep is left: as a
	// keeper's would be.
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // its session and group ids are sh's pid
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	left, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(left, syscall.SIGKILL)
	sh := cmd.Process.Pid
	alive := func() bool {
		st, err := procStat(left)
		return err == nil && st.state != 'Z'
	}
	// Another process holding the pid a keeper had.
	other := exec.Command("sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	ost, err := procStart(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	killLeft(Meta{Keeper: other.Process.Pid, KeeperStart: ost - 1, Pgid: other.Process.Pid, StartedAt: time.Now()})
	if st, err := procStat(other.Process.Pid); err != nil || st.state == 'Z' {
		t.Fatalf("killLeft killed the process that reuses a keeper's pid (%c %v)", st.state, err)
	}
	killLeft(Meta{Keeper: sh, Pgid: sh, StartedAt: time.Unix(1, 0)}) // a keeper of an earlier boot
	if !alive() {
		t.Fatal("killLeft killed a process after a reboot")
	}
	killLeft(Meta{Keeper: sh, Pgid: sh, StartedAt: time.Now()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for alive() {
		if ctx.Err() != nil {
			t.Fatal("a keeper's leftover outlived killLeft")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel, with a deadline
	}
}

// TestScan: Scan finds every exec in a directory and leaves a name that is no
// exec id alone.
func TestScan(t *testing.T) {
	x := start(t, []string{"/bin/true"}, 0)
	wait(t, x)
	root := filepath.Dir(x.Dir())
	if err := os.Mkdir(filepath.Join(root, ".not an id"), 0o700); err != nil {
		t.Fatal(err)
	}
	xs, err := Scan(root)
	if err != nil || len(xs) != 1 || xs[0].ID() != "x1" {
		t.Fatalf("scan: %v %v", xs, err)
	}
	if ex, ok := xs[0].Exit(); !ok || ex.Code != 0 {
		t.Fatalf("scanned exit %+v %v", ex, ok)
	}
}

// FuzzChunks: a stream written in any pieces with any chunk size reads back, at
// any offset and cut to any budget, as the bytes written with chunk 0 and the
// newest two chunks kept (a reference model of the rotation).
func FuzzChunks(f *testing.F) {
	f.Add([]byte("hello, world: more than three chunks of it"), byte(4), byte(3), uint16(5), uint16(7), uint16(9))
	f.Add([]byte("0123456789"), byte(5), byte(5), uint16(0), uint16(100), uint16(100))
	f.Add([]byte{}, byte(1), byte(1), uint16(0), uint16(1), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, chunk, piece byte, from, limit, budget uint16) {
		if chunk == 0 || piece == 0 || len(data) > 4096 {
			return
		}
		dir := t.TempDir()
		w := &chunkWriter{dir: dir, name: "stdout", chunk: int64(chunk)}
		for rest := data; len(rest) > 0; {
			k := min(len(rest), int(piece))
			w.Write(rest[:k])
			rest = rest[k:]
		}
		w.close()
		s, err := openStream(dir, "stdout", int64(chunk))
		if err != nil {
			t.Fatal(err)
		}
		n, c := int64(len(data)), int64(chunk)
		oldest := int64(0)
		if n > 0 {
			if last := (n - 1) / c; last >= 3 {
				oldest = (last - 1) * c
			}
		}
		if s.end != n || s.oldest != oldest {
			t.Fatalf("end %d oldest %d, want %d %d", s.end, s.oldest, n, oldest)
		}
		got, off, err := s.readAt(int64(from), int(limit))
		if err != nil {
			t.Fatal(err)
		}
		head := min(c, n)
		wantOff := min(int64(from), n)
		var want []byte
		if wantOff < head {
			want = data[wantOff:min(head, wantOff+int64(limit))]
		} else {
			wantOff = max(wantOff, oldest)
			want = data[wantOff:min(n, wantOff+int64(limit))]
		}
		if off != wantOff || !bytes.Equal(got, want) {
			t.Fatalf("readAt(%d, %d) = %q at %d, want %q at %d", from, limit, got, off, want, wantOff)
		}
		text, omitted, err := s.cut(int(budget))
		if err != nil {
			t.Fatal(err)
		}
		if n <= int64(budget) && oldest == 0 {
			if !bytes.Equal(text, data) || omitted != 0 {
				t.Fatalf("cut(%d) = %q, want all", budget, text)
			}
			return
		}
		h := min(int64(budget)/2, head)
		tailFrom := max(n-(int64(budget)-h), oldest, h)
		wantText := string(data[:h]) + "\n[… " + strconv.FormatInt(tailFrom-h, 10) + " bytes omitted …]\n" + string(data[tailFrom:])
		if string(text) != wantText || omitted != tailFrom-h {
			t.Fatalf("cut(%d) = %q, want %q", budget, text, wantText)
		}
	})
}

// FuzzParseStat: any /proc/PID/stat line parses without a panic, and a
// command holding spaces and parens does not shift the fields.
func FuzzParseStat(f *testing.F) {
	// the seed's command holds ") " twice
	if st, err := parseStat([]byte("42 (a) b) c) S 1 41 40 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 777 1000 10")); err != nil || st != (stat{state: 'S', pgid: 41, sid: 40, start: 777}) {
		f.Fatalf("parseStat: %+v %v", st, err)
	}
	f.Add([]byte("42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 777 1000 10"))
	f.Add([]byte("1 (x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err == nil && st.state == 0 {
			t.Fatalf("parsed %q: state 0: %+v", b, st)
		}
	})
}

// TestRelativeDir: a dir relative to the caller's working directory (as under
// `fleetmux dev`'s ./.fleetmux) works, though the keeper runs in "/".
func TestRelativeDir(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join("data", "execs"), 0o700); err != nil {
		t.Fatal(err)
	}
	x, err := Start("", filepath.Join("data", "execs", "x4"), Spec{ID: "x4", Argv: []string{"/bin/echo", "relative"}, Env: []string{"PATH=" + os.Getenv("PATH")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, x); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	if out, _, _ := x.Cut(api.StreamStdout, 100); string(out) != "relative\n" {
		t.Fatalf("stdout %q", out)
	}
}
