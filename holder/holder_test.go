package holder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain doubles as the "other user" of TestPeerRefused: with HOLDER_TEST_PEER set
// the binary connects to that socket, says hello and lists, and exits 0 when the
// holder refused it, 3 when it was served.
func TestMain(m *testing.M) {
	if p := os.Getenv("HOLDER_TEST_PEER"); p != "" {
		os.Exit(peerAttack(p))
	}
	os.Exit(m.Run())
}

func peerAttack(path string) int {
	nc, err := net.Dial("unixpacket", path)
	if err != nil {
		return 4
	}
	c := newConn(nc.(*net.UnixConn))
	if err := c.sendJSON(kindHello, hello{Proto: Proto}); err != nil {
		return 0
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	kind, _, _, err := c.recv()
	if err != nil || kind != kindHello {
		return 0
	}
	return 3
}

func startHolder(t *testing.T) (*Server, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "holder")
	srv, err := Listen(Config{Dir: dir, Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleExit: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		srv.Close()
	})
	return srv, dir
}

func dialT(t *testing.T, dir string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func spawnT(t *testing.T, c *Client, id string, argv ...string) (Info, *os.File) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, master, err := c.Spawn(ctx, Spawn{ID: id, Argv: argv, Dir: "/", Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb"}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	return info, master
}

// collect reads st until its output contains want (or, with want "", the exit);
// it checks that offsets follow each other from st.From.
func collect(t *testing.T, st *Stream, want string) (out []byte, end int64, exit *Chunk) {
	t.Helper()
	off := st.From
	timer := time.AfterFunc(10*time.Second, func() { st.Close() })
	defer timer.Stop()
	for {
		ch, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended before %q: %v; got %q", want, err, out)
		}
		if ch.Exited {
			if ch.Off != off {
				t.Fatalf("exit at %d, output ended at %d", ch.Off, off)
			}
			return out, off, &ch
		}
		if ch.Off != off {
			t.Fatalf("chunk at %d, want %d (gap or repeat)", ch.Off, off)
		}
		out = append(out, ch.Data...)
		off += int64(len(ch.Data))
		if want != "" && bytes.Contains(out, []byte(want)) {
			return out, off, nil
		}
	}
}

// TestReattach is the holder's promise: the agent goes away (its connections
// close), the program keeps running and its output keeps being kept; the next
// agent attaches from where it was and gets the rest exactly once, the exit code,
// and a master it can write to and ask the kernel about.
func TestReattach(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	info, master := spawnT(t, c, "s1", "/bin/sh", "-c", `echo one; read x; i=0; while [ $i -lt 50 ]; do echo "line-$i-$x"; i=$((i+1)); done; sleep 0.3; exit 7`)
	if info.PID <= 0 || info.ID != "s1" {
		t.Fatalf("spawn info %+v", info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, off, _ := collect(t, st, "one\r\n")
	// The agent writes input to its copy of the master; the holder reads the echo.
	if _, err := master.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	// The foreground process group, asked on the passed master, is the child's.
	mfd, err := rawFD(st.Master)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := unix.IoctlGetInt(mfd, unix.TIOCGPGRP)
	if err != nil || pg != info.PID {
		t.Fatalf("TIOCGPGRP on the passed master = %d, %v; want %d", pg, err, info.PID)
	}
	// The agent dies: all its connections close, nothing reads for a while.
	st.Close()
	st.Master.Close()
	c.Close()
	time.Sleep(50 * time.Millisecond) // not synchronisation: output piles up in the ring meanwhile

	c2 := dialT(t, dir)
	list, err := c2.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "s1" || list[0].PID != info.PID {
		t.Fatalf("list after the agent went: %+v, %v", list, err)
	}
	st2, err := c2.Attach(ctx, "s1", off, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	defer st2.Master.Close()
	if st2.From != off {
		t.Fatalf("reattach from %d, want %d", st2.From, off)
	}
	rest, end, exit := collect(t, st2, "")
	all := string(out) + string(rest)
	for i := range 50 {
		if n := strings.Count(all, "line-"+strconv.Itoa(i)+"-hi\r\n"); n != 1 {
			t.Fatalf("line-%d seen %d times in %q", i, n, all)
		}
	}
	if exit.Code == nil || *exit.Code != 7 {
		t.Fatalf("exit code %v, want 7", exit.Code)
	}
	// The whole output is still in the ring: a read from 0 is the same bytes.
	st3, err := c2.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, end3, _ := collect(t, st3, "")
	st3.Close()
	st3.Master.Close()
	if string(again) != all || end3 != end {
		t.Fatalf("a second read of the ring differs:\n%q\n%q", again, all)
	}
	got, err := c2.CloseSession(ctx, "s1")
	if err != nil || !got.Exited || got.Code == nil || *got.Code != 7 {
		t.Fatalf("close: %+v, %v", got, err)
	}
	if list, _ := c2.List(ctx); len(list) != 0 {
		t.Fatalf("closed session still listed: %+v", list)
	}
	if _, err := c2.Attach(ctx, "s1", 0, 0); !errors.Is(err, ErrNoSession) {
		t.Fatalf("attach of a closed session: %v, want ErrNoSession", err)
	}
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM)
}

// TestAttachEpoch: one attach at a time, by epoch. An attach that does not name
// the live stream's epoch is refused; one that names it (the restarted agent
// that listed the session) ends that stream, so two agents never consume one
// session; an attach by an epoch that is no longer the session's is refused.
func TestAttachEpoch(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	spawnT(t, c, "s1", "/bin/sh", "-c", "echo ready; exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	collect(t, a, "ready")
	if _, err := c.Attach(ctx, "s1", 0, 0); !errors.Is(err, ErrStale) {
		t.Fatalf("an attach while another is live: %v, want ErrStale", err)
	}
	if _, err := c.Attach(ctx, "s1", 0, a.Epoch+1); !errors.Is(err, ErrStale) {
		t.Fatalf("an attach by an epoch to come: %v, want ErrStale", err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Epoch != a.Epoch || list[0].StreamPID != os.Getpid() {
		t.Fatalf("list: %+v %v; want epoch %d, stream pid %d", list, err, a.Epoch, os.Getpid())
	}
	b, err := c.Attach(ctx, "s1", 0, list[0].Epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Epoch != a.Epoch+1 {
		t.Fatalf("epochs %d then %d", a.Epoch, b.Epoch)
	}
	collect(t, b, "ready")
	if _, err := a.Next(); err == nil {
		t.Fatal("the older stream still delivers after a newer attach")
	}
	if _, err := c.Attach(ctx, "s1", 0, a.Epoch); !errors.Is(err, ErrStale) {
		t.Fatalf("an attach by the older stream's epoch: %v, want ErrStale", err)
	}
	if _, err := c.CloseSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if ch, err := b.Next(); err == nil && !ch.Exited {
		t.Fatalf("stream of a closed session delivered %+v", ch)
	}
}

// TestChildFDsAndKept: files passed with a spawn reach the child at the asked fd
// numbers; the kept one comes back on every attach, and still works after the
// agent's copy closed (a guard question survives the agent).
func TestChildFDsAndKept(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, master, err := c.Spawn(ctx, Spawn{ID: "g1", Argv: []string{"/bin/sh", "-c", "echo asked >&4; read a <&4; echo answer=$a"},
		Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}, Cols: 80, Rows: 24, ChildFDs: []int{4}, Keep: true, Nonce: "n0nce"}, theirs, ours)
	theirs.Close()
	ours.Close() // the agent's copy: only the holder's remains
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	st, err := c.Attach(ctx, "g1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer st.Master.Close()
	if st.Kept == nil || st.Nonce != "n0nce" {
		t.Fatalf("attach: kept %v nonce %q", st.Kept, st.Nonce)
	}
	defer st.Kept.Close()
	_ = st.Kept.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, err := st.Kept.Read(buf)
	if err != nil || string(buf[:n]) != "asked\n" {
		t.Fatalf("kept end read %q, %v", buf[:n], err)
	}
	if _, err := st.Kept.Write([]byte("yes\n")); err != nil {
		t.Fatal(err)
	}
	_, _, exit := collect(t, st, "")
	if exit.Code == nil || *exit.Code != 0 {
		t.Fatalf("exit %v", exit.Code)
	}
}

// TestVersionRefused: a holder refuses an agent of another protocol, and an agent
// refuses a holder of another, each with ErrVersion and a message naming both.
func TestVersionRefused(t *testing.T) {
	_, dir := startHolder(t)
	nc, err := net.Dial("unixpacket", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := newConn(nc.(*net.UnixConn))
	if err := c.sendJSON(kindHello, hello{Proto: Proto + 1}); err != nil {
		t.Fatal(err)
	}
	var r reply
	if _, err := c.recvJSON(kindReply, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Error, "protocol 1, the agent 2") {
		t.Fatalf("refusal %q", r.Error)
	}

	// A fake holder of protocol 2.
	fdir := t.TempDir()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(fdir, SocketName), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		fc := newConn(uc)
		var hi hello
		if _, err := fc.recvJSON(kindHello, &hi); err == nil {
			_ = fc.sendJSON(kindHello, hello{Proto: Proto + 1})
		}
		_, _, _, _ = fc.recv()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, fdir)
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "restart the holder") {
		t.Fatalf("dial of a protocol-2 holder: %v", err)
	}
}

// TestPeerRefused performs the attack: another local user reaches the socket (its
// directory and mode opened up by mistake) and asks for the sessions; SO_PEERCRED
// refuses it before any hello.
func TestPeerRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	srv, dir := startHolder(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.MkdirTemp("", "holder-peer")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(pub)
	copyExe(t, bin, filepath.Join(pub, "peer"))
	for _, p := range []string{pub, filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir), dir} {
		os.Chmod(p, 0o755)
	}
	os.Chmod(srv.Path(), 0o777)
	cmd := exec.Command(filepath.Join(pub, "peer"))
	cmd.Env = []string{"HOLDER_TEST_PEER=" + srv.Path()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		t.Fatalf("another user was served by the holder: %s", out)
	default:
		t.Fatalf("peer: %v: %s", err, out)
	}
}

func copyExe(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSecondHolderRefused: one holder per directory.
func TestSecondHolderRefused(t *testing.T) {
	_, dir := startHolder(t)
	if _, err := Listen(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "another holder") {
		t.Fatalf("second holder: %v", err)
	}
}

// TestBadSpawns: a bad spawn is refused and changes nothing.
func TestBadSpawns(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, sp := range []Spawn{
		{ID: "a.b", Argv: []string{"/bin/true"}, Cols: 80, Rows: 24},
		{ID: "x", Cols: 80, Rows: 24},
		{ID: "x", Argv: []string{"/bin/true"}, Cols: 0, Rows: 24},
		{ID: "x", Argv: []string{"/bin/true"}, Cols: 80, Rows: 24, Ring: 10},
		{ID: "x", Argv: []string{"/nonexistent"}, Cols: 80, Rows: 24},
		{ID: "x", Argv: []string{"/bin/true"}, Cols: 80, Rows: 24, ChildFDs: []int{3}},
	} {
		if _, _, err := c.Spawn(ctx, sp); err == nil {
			t.Errorf("spawn %+v accepted", sp)
		}
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after bad spawns: %+v, %v", list, err)
	}
	spawnT(t, c, "x", "/bin/sh", "-c", "exec sleep 60")
	if _, _, err := c.Spawn(ctx, Spawn{ID: "x", Argv: []string{"/bin/true"}, Cols: 80, Rows: 24}); err == nil {
		t.Fatal("a second session x was accepted")
	}
}

// TestEnsureLaunches: Ensure starts a detached holder when none answers (here the
// test binary's own holder mode is not available, so a fake holder command: this
// test binary run with HOLDER_TEST_SERVE), and returns a client of it.
func TestEnsureLaunches(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "holder")
	t.Setenv("HOLDER_TEST_DIR", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Ensure(ctx, dir, []string{bin, "-test.run=^TestServeHelper$"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, pid := c.HolderVersion()
	if pid <= 0 || pid == os.Getpid() {
		t.Fatalf("holder pid %d", pid)
	}
	// It runs in a session of its own: a signal to our process group spares it.
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Fatalf("launched holder's session %d, want its own (%d)", sid, pid)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
}

// TestServeHelper is the holder TestEnsureLaunches launches (it does nothing in a
// normal run).
func TestServeHelper(t *testing.T) {
	dir := os.Getenv("HOLDER_TEST_DIR")
	if dir == "" {
		t.Skip("helper of TestEnsureLaunches")
	}
	srv, err := Listen(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signalContext()
	defer stop()
	_ = srv.Serve(ctx)
	srv.Close()
}

// TestIdleExit: a holder with no session and no agent ends Serve after IdleExit (from
// Listen, and from the moment the last session and connection are gone); a connected
// agent or a held session keeps it.
func TestIdleExit(t *testing.T) {
	const idle = 300 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "holder")
	serve := func() (*Server, chan error) {
		srv, err := Listen(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleExit: idle})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		done := make(chan error, 1)
		go func() { done <- srv.Serve(context.Background()) }()
		return srv, done
	}
	exits := func(done chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: serve: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the holder did not exit", what)
		}
	}
	stays := func(done chan error, what string) {
		t.Helper()
		select { // the absence of an exit for several idle periods: a bounded wait
		case err := <-done:
			t.Fatalf("%s: the holder exited (%v)", what, err)
		case <-time.After(4 * idle):
		}
	}

	// Nobody ever connects.
	srv, done := serve()
	exits(done, "never used")
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c, err := Dial(ctx, dir); err == nil {
		c.Close()
		t.Fatal("an idle holder that exited still answers")
	}

	// An agent connected, then a session held with no agent, then nothing.
	srv, done = serve()
	c := dialT(t, dir)
	stays(done, "an agent connected")
	info, master := spawnT(t, c, "s1", "sleep", "60")
	master.Close()
	c.Close()
	stays(done, "a session held, no agent")
	c = dialT(t, dir)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := c.CloseSession(ctx2, info.ID); err != nil {
		t.Fatal(err)
	}
	stays(done, "the agent still connected")
	c.Close()
	exits(done, "no session and no agent")
	srv.Close()
}

// TestSlowAgentLosesNothing: an attached agent that reads slower than the program
// writes (here it pauses after every chunk) gets every byte: with an agent
// attached the holder waits for it before its ring would overwrite output the
// agent has not had (the program waits, as on a slow terminal). Before, a flood of
// more than the ring came to the agent with gaps.
func TestSlowAgentLosesNothing(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const ring = 64 << 10
	// About 1.2 MB: 18 rings. stty -onlcr: the bytes on the master are the program's.
	_, master, err := c.Spawn(ctx, Spawn{ID: "s1", Argv: []string{"/bin/sh", "-c", "stty -onlcr; seq 1 200000; echo END"}, Dir: "/",
		Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb"}, Cols: 80, Rows: 24, Ring: ring})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	st, err := c.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Master.Close()
	var out []byte
	off := st.From
	timer := time.AfterFunc(60*time.Second, func() { st.Close() })
	defer timer.Stop()
	for !bytes.Contains(out, []byte("END\n")) {
		ch, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended after %d bytes: %v", len(out), err)
		}
		if ch.Exited {
			break
		}
		if ch.Off != off {
			t.Fatalf("chunk at %d, want %d: the holder dropped %d bytes the agent had not had", ch.Off, off, ch.Off-off)
		}
		out = append(out, ch.Data...)
		off += int64(len(ch.Data))
		time.Sleep(200 * time.Microsecond) // a slow agent: the pace of reading, not synchronisation
	}
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	want.WriteString("END\n")
	if !bytes.Equal(out, want.Bytes()) {
		t.Fatalf("got %d bytes, want %d (the program's output, whole)", len(out), want.Len())
	}
}

// procState is the state letter of pid in /proc (0: no such process).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestExitedPidStaysTheSessions: a session whose shell exited keeps its zombie
// until the session is closed, so its pid (and the process group and session ids
// it led) cannot be given to another process meanwhile: closing it signals only
// its own. The review's attack: session a's shell exits and was reaped, session
// b's shell got a's pid (steered with ns_last_pid, as root), and closing a killed
// b. Now b cannot get that pid while a is open, and closing a leaves b running.
func TestExitedPidStaysTheSessions(t *testing.T) {
	_, dir := startHolder(t)
	c := dialT(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	infoA, _ := spawnT(t, c, "a", "/bin/sh", "-c", "exit 3")
	stA, err := c.Attach(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	stA.Master.Close()
	if _, _, x := collect(t, stA, ""); x == nil || x.Code == nil || *x.Code != 3 {
		t.Fatalf("a's exit: %+v", x)
	}
	stA.Close()
	if st := procState(infoA.PID); st != 'Z' {
		t.Fatalf("a's shell exited and its pid %d is %q in /proc, want its zombie (Z) kept", infoA.PID, st)
	}
	if os.Geteuid() == 0 {
		// Ask the kernel for a's pid for the next process: it must not get it.
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(infoA.PID-1)), 0); err != nil {
			t.Fatal(err)
		}
	}
	infoB, _ := spawnT(t, c, "b", "/bin/sh", "-c", "sleep 100")
	if infoB.PID == infoA.PID {
		t.Fatalf("session b's shell got the pid %d of a's, which is not closed yet", infoA.PID)
	}
	if _, err := c.CloseSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if st := procState(infoA.PID); st == 'Z' {
		t.Fatalf("a is closed and its zombie %d is still there", infoA.PID)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.ID == "b" && i.Exited {
			t.Fatalf("closing a ended b: %+v", i)
		}
	}
}

// TestDialKeyWrittenMeanwhile: an agent that read the key file (or found none)
// just before a starting holder wrote its own shows the old key and is
// refused; it reads the file again and is served. Before, Dial gave up with
// ErrDenied, and fleetmux dev stopped with "holder: refused: wrong key". A key
// that is wrong and stays in the file is still refused.
func TestDialKeyWrittenMeanwhile(t *testing.T) {
	_, dir := startHolder(t)
	keyPath := filepath.Join(dir, KeyName)
	key, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	reads := 0
	afterKeyRead = func() {
		if reads++; reads == 1 { // the holder writes its key after our read
			if err := os.WriteFile(keyPath, key, 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { afterKeyRead = nil })
	if _, err := dialT(t, dir).List(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reads != 2 {
		t.Fatalf("%d hellos, want 2", reads)
	}
	reads = 1 // no more writes: the stale key stays
	if err := os.WriteFile(keyPath, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, dir); !errors.Is(err, ErrDenied) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a wrong key in the file: %v, want ErrDenied", err)
	}
	if reads != 2 {
		t.Fatalf("%d hellos with a key that stayed wrong, want 1", reads-1)
	}
}

// TestKeyRequired performs the attack of a process of the holder's own user
// that reaches the socket but cannot read the holder's directory (a session,
// kept out of the node's data dir): it connects, says hello without the key,
// or with a wrong one, and asks for the sessions. The holder refuses it; on the
// code without the key it was served.
func TestKeyRequired(t *testing.T) {
	srv, dir := startHolder(t)
	for _, key := range []string{"", strings.Repeat("0", 64)} {
		nc, err := net.Dial("unixpacket", srv.Path())
		if err != nil {
			t.Fatal(err)
		}
		c := newConn(nc.(*net.UnixConn))
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.sendJSON(kindHello, hello{Proto: Proto, Key: key}); err != nil {
			t.Fatal(err)
		}
		kind, body, _, err := c.recv()
		if err == nil && kind == kindHello {
			_ = c.sendJSON(kindRequest, request{Op: "list"})
			kind, body, _, _ = c.recv()
			t.Fatalf("key %q: served: %c %s", key, kind, body)
		}
		var r reply
		if err != nil || kind != kindReply || jsonUnmarshal(body, &r) != nil || !r.Denied {
			t.Fatalf("key %q: %v %c %s", key, err, kind, body)
		}
		nc.Close()
	}
	// The agent, which reads the key, is served.
	if _, err := dialT(t, dir).List(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestListenLeavesUmask: Listen does not change the process's umask, not even
// for a moment: a directory another goroutine makes meanwhile gets its mode.
// It set umask 0177 around its bind, so a session's integration directory made
// then was 0600, which a sandboxed root shell (no capabilities) cannot enter:
// bash could not read its rc file and never prompted.
func TestListenLeavesUmask(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			srv, err := Listen(Config{Dir: filepath.Join(t.TempDir(), "holder"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleExit: -1})
			if err != nil {
				t.Error(err)
				return
			}
			srv.Close()
		}
	}()
	defer func() { close(stop); <-done }()
	parent := t.TempDir()
	for i := range 1500 {
		d, err := os.MkdirTemp(parent, "d")
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Fatalf("directory %d made while Listen ran: mode %v", i, st.Mode().Perm())
		}
	}
}
