package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// unreachable is an address where nothing listens, so a verb that gets past its
// argument checks fails with exit 1 instead of the usage error a test wants.
const unreachable = "http://127.0.0.1:1"

func TestClientVerbUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"screen"}, "screen: missing session address NODE/ID"},
		{[]string{"screen", "web.1/s1"}, `screen: address "web.1/s1": node name "web.1": character '.'`},
		{[]string{"screen", "web-1"}, `has no '/': want NODE/ID`},
		{[]string{"screen", "a/b", "c"}, `screen: unexpected argument "c"`},
		{[]string{"nodes", "x"}, `nodes: takes no arguments, got "x"`},
		{[]string{"ls", "--node", "a.b"}, `ls: --node: name "a.b"`},
		{[]string{"ls", "--label", "nokey"}, `--label "nokey": want KEY=VALUE`},
		{[]string{"run", "--", "ls"}, "run: no session address"},
		{[]string{"run"}, "run: no session address"},
		{[]string{"run", "a/b"}, "run: no command given"},
		{[]string{"run", "a/b", "--", " "}, "run: no command given"},
		{[]string{"run", "a/b", "ls", "-la"}, "unknown shorthand flag: 'l' in -la"},
		{[]string{"run", "a/b", "--batch", "3", "--", "ls"}, "run: --batch applies to a fan-out only"},
		{[]string{"run", "a/b", "-v", "--", "ls"}, "run: --verbose applies to a fan-out only"},
		{[]string{"run", "a/b", "--output", "--", "ls"}, "run: --output applies to a fan-out only"},
		{[]string{"run", "a/b", "--timeout", "0s", "--", "ls"}, "run: --timeout 0s: want a positive duration"},
		{[]string{"run", "a/b", "--max-output", "-2", "--", "ls"}, "--max-output -2"},
		{[]string{"run", "--all", "--label", "a=b", "--", "ls"}, "run: --all selects every node"},
		{[]string{"run", "--sessions", "a/b", "--nodes", "x", "--", "ls"}, "run: --sessions names the targets itself"},
		{[]string{"run", "--sessions", "a/b", "--session", "t", "--", "ls"}, "do not go with --sessions"},
		{[]string{"run", "--sessions", "a.b/c", "--", "ls"}, `run: --sessions: address "a.b/c"`},
		{[]string{"run", "--nodes", "a b", "--", "ls"}, `run: --nodes: name "a b"`},
		{[]string{"run", "--all", "a/b", "--", "ls"}, `run: "a/b" before --: a fan-out takes its targets`},
		{[]string{"run", "--all"}, "run: no command given"},
		{[]string{"run", "--all", "--batch", "-1", "--", "ls"}, "run: --batch -1"},
		{[]string{"run", "--label", "novalue", "--", "ls"}, `--label "novalue": want KEY=VALUE`},
		{[]string{"new", "--shell", "bash", "--", "python3"}, "new: --shell bash and a program (python3) exclude each other"},
		{[]string{"new", "--env", "=x"}, `--env "=x": want KEY=VALUE`},
		{[]string{"new", "--node", "bad name"}, `new: --node: name "bad name"`},
		{[]string{"new", "--cols", "-3"}, "new: --cols -3"},
		{[]string{"send", "a/b"}, "send: nothing to send"},
		{[]string{"send"}, "send: missing session address"},
		{[]string{"keys", "a/b"}, "keys: missing session address NODE/ID and at least one KEY"},
		{[]string{"keys", "a/b", ""}, "keys: key 1 is empty"},
		{[]string{"block", "a/b", "0"}, `block: "0": want a block number`},
		{[]string{"block", "a/b", "x"}, `block: "x": want a block number`},
		{[]string{"block", "a/b"}, "block: missing session address NODE/ID and a block number"},
		{[]string{"block", "a/b", "1", "--limit", "-1"}, "block: --offset and --limit count lines"},
		{[]string{"wait", "a/b", "--until", "done"}, `wait: --until "done": want idle, waiting_input, exited or output`},
		{[]string{"wait", "a/b", "--timeout", "-1s"}, "wait: --timeout -1s"},
		{[]string{"wait", "a/b", "--after", "-1"}, "wait: --after -1"},
		{[]string{"logs", "a/b", "--from", "-1"}, "logs: --from -1"},
		{[]string{"attach", "a/b", "--from", "-5"}, "attach: --from -5"},
		{[]string{"attach", "a/b", "--json"}, "unknown flag: --json"},
		{[]string{"kill", "a/"}, `kill: address "a/": empty session id`},
		{[]string{"nodes", "--addr", "ftp://x"}, `--addr: controller address "ftp://x": scheme "ftp"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append(slicesClone(tt.args), "--addr", unreachable)
			if tt.args[0] == "nodes" && len(tt.args) > 1 && tt.args[1] == "--addr" {
				args = tt.args
			}
			if i := indexOf(tt.args, "--"); i >= 0 { // flags go before --
				args = append(append(slicesClone(tt.args[:i]), "--addr", unreachable), tt.args[i:]...)
			}
			// run's statuses are the command's own: its usage errors are 255, as
			// ssh's are (a 2 could be the command's: bash's for a syntax error).
			want := 2
			if tt.args[0] == "run" {
				want = 255
			}
			_, _, err := runArgs(t, args...)
			if exitCode(err) != want || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("fleetmux %s: exit %d, %v\nwant exit %d and an error containing %q", strings.Join(args, " "), exitCode(err), err, want, tt.want)
			}
		})
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestAddrFromTheEnvironment(t *testing.T) {
	t.Setenv(envAddr, "gopher://x")
	_, _, err := runArgs(t, "ls")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), `scheme "gopher"`) {
		t.Errorf("ls with %s=gopher://x: exit %d, %v", envAddr, exitCode(err), err)
	}
}

func TestNoControllerSaysHowToStartOne(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	_, _, err = runArgs(t, "nodes", "--addr", addr)
	var rep bytes.Buffer
	report(&rep, err)
	want := "fleetmux: no controller at " + addr + " (connection refused): is `fleetmux dev` running?"
	if exitCode(err) != 255 || !strings.HasPrefix(rep.String(), want) {
		t.Errorf("exit %d, report %q; want exit 255 and %q", exitCode(err), rep.String(), want)
	}
}

func TestReportOfAPIErrors(t *testing.T) {
	o := clientOptions{addr: unreachable}
	err := o.fail(&client.Error{Status: 404, Code: api.CodeNotFound, Message: "no session web-1/s9"})
	var rep bytes.Buffer
	report(&rep, err)
	if exitCode(err) != 1 || rep.String() != "fleetmux: not_found: no session web-1/s9\n" {
		t.Errorf("exit %d, report %q", exitCode(err), rep.String())
	}
}

func intp(i int) *int { return &i }

func TestPrintTables(t *testing.T) {
	var b bytes.Buffer
	printNodes(&b, []api.Node{
		{Name: "web-2", Status: api.NodeDead, Addr: "10.0.0.6:7946", Version: "0.1.0"},
		{Name: "web-1", Status: api.NodeAlive, Addr: "10.0.0.5:7946", Version: "0.1.0", Sessions: 3, Labels: map[string]string{"zone": "a", "role": "web"}},
	})
	want := "" +
		"NAME   STATUS  SESSIONS  VERSION  ADDR           LABELS\n" +
		"web-1  alive   3         0.1.0    10.0.0.5:7946  role=web,zone=a\n" +
		"web-2  dead    0         0.1.0    10.0.0.6:7946  -\n"
	if b.String() != want {
		t.Errorf("nodes:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	printSessions(&b, []api.Session{
		{Node: "web-1", ID: "s3", State: "running", Title: "build", CurrentCommand: "make\ttest", Cwd: "/srv/app"},
		{Node: "web-1", ID: "s4", State: "idle", LastExitCode: intp(2), Cwd: "/"},
		{Node: "web-2", ID: "s1", State: "exited", ExitCode: intp(0), Title: "a\nb"},
		{Node: "web-2", ID: "s2", State: "starting"},
	})
	want = "" +
		"ADDRESS   STATE     TITLE  CMD/LAST-EXIT  CWD\n" +
		"web-1/s3  running   build  make test      /srv/app\n" +
		"web-1/s4  idle      -      exit 2         /\n" +
		"web-2/s1  exited    a …    exited 0       -\n" +
		"web-2/s2  starting  -      -              -\n"
	if b.String() != want {
		t.Errorf("ls:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	printBlocks(&b, []api.Block{
		{N: 1, Command: "make test", State: "done", ExitCode: intp(2)},
		{N: 2, Command: "for i in 1 2; do\necho $i\ndone", State: "done", Fallback: true},
		{N: 3, Command: strings.Repeat("x", 70), State: "running"},
	})
	want = "" +
		"N  STATE    EXIT  COMMAND\n" +
		"1  done     2     make test\n" +
		"2  done     -     for i in 1 2; do …\n" +
		"3  running  -     " + strings.Repeat("x", 59) + "…\n"
	if b.String() != want {
		t.Errorf("blocks:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestRunExit(t *testing.T) {
	tests := []struct {
		name string
		r    api.BlockResult
		code int
		msg  string
	}{
		{"exit 0", api.BlockResult{Block: api.Block{N: 1, State: "done", ExitCode: intp(0)}}, 0, ""},
		{"exit 3", api.BlockResult{Block: api.Block{N: 1, State: "done", ExitCode: intp(3)}}, 3, ""},
		{"fallback", api.BlockResult{Block: api.Block{N: 1, State: "done", Fallback: true, ExitCodeNote: api.NoteFallback}}, 254,
			"web-1/s3: block 1 finished, exit code unknown: " + api.NoteFallback},
		{"no code, no note", api.BlockResult{Block: api.Block{N: 2, State: "done"}}, 254, "exit code unknown: no reason given"},
		{"running", api.BlockResult{Block: api.Block{N: 7, State: "running"}}, 124, "still running after 1m0s: fleetmux wait web-1/s3 (then fleetmux block web-1/s3 7)"},
	}
	for _, tt := range tests {
		err := runExit("web-1/s3", time.Minute, tt.r)
		var rep bytes.Buffer
		report(&rep, err)
		if exitCode(err) != tt.code || !strings.Contains(rep.String(), tt.msg) || (tt.msg == "") != (rep.Len() == 0) {
			t.Errorf("%s: exit %d, report %q; want %d, %q", tt.name, exitCode(err), rep.String(), tt.code, tt.msg)
		}
	}
}

func TestOmittedNote(t *testing.T) {
	var b bytes.Buffer
	omittedNote(&b, "web-1/s3", api.BlockResult{Block: api.Block{N: 4}})
	if b.Len() != 0 {
		t.Errorf("note without omitted bytes: %q", b.String())
	}
	omittedNote(&b, "web-1/s3", api.BlockResult{Block: api.Block{N: 4}, OmittedBytes: 1234, Text: "head\ntail\n"})
	if want := "fleetmux: 1234 bytes omitted; read all of it with: fleetmux block web-1/s3 4 --max-output 1308"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("note %q, want %q…", b.String(), want)
	}
}

func fanoutFixture() api.Fanout {
	return api.Fanout{
		Results: []api.FanoutResult{
			{Node: "web-1", Session: "s3", Block: &api.Block{State: "done", ExitCode: intp(0)}, ExitCode: intp(0), DurationMS: 12,
				Text: "\n up 3 days,\tload 0.1\nsecond line\n"},
			{Node: "web-2", Error: &api.Error{Code: api.CodeUnavailable, Message: "node web-2 is dead"}, DurationMS: 1},
			{Node: "web-3", Session: "s1", Block: &api.Block{State: "done", ExitCode: intp(2)}, ExitCode: intp(2), DurationMS: 1500,
				Text: strings.Repeat("é", 80), OmittedBytes: 10},
			{Node: "web-4", Session: "s9", Block: &api.Block{State: "running"}, DurationMS: 60000},
			{Node: "web-5", Error: &api.Error{Code: api.CodeSkipped, Message: "an earlier target failed"}},
		},
		OK: 1, Failed: 4,
	}
}

func TestPrintFanout(t *testing.T) {
	var b bytes.Buffer
	if err := printFanout(&b, fanoutFixture(), false); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"web-1/s3  exit=0   12ms  up 3 days, load 0.1 …\n" +
		"web-2     FAILED   unavailable: node web-2 is dead\n" +
		"web-3/s1  exit=2   1.5s  " + strings.Repeat("é", 59) + "…\n" +
		"web-4/s9  running  1m0s\n" +
		"web-5     SKIPPED  skipped: an earlier target failed\n" +
		"ok=1 failed=4\n"
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	printFanout(&b, fanoutFixture(), true)
	for _, w := range []string{
		"=== web-1/s3  exit=0  12ms  up 3 days, load 0.1 …\n\n up 3 days,\tload 0.1\nsecond line\n=== web-2  FAILED",
		"=== web-3/s1  exit=2  1.5s  " + strings.Repeat("é", 59) + "…  (10 bytes omitted)\n" + strings.Repeat("é", 80) + "\n",
		"\nweb-1/s3  exit=0   12ms",
		"ok=1 failed=4\n",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("verbose output:\n%s\nwant it to contain %q", b.String(), w)
		}
	}
}

func TestFanoutExit(t *testing.T) {
	one := func(r api.FanoutResult) api.Fanout { return api.Fanout{Results: []api.FanoutResult{r}} }
	tests := []struct {
		name string
		fo   api.Fanout
		code int
	}{
		{"all ok", api.Fanout{Results: make([]api.FanoutResult, 3), OK: 3}, 0},
		{"some failed", fanoutFixture(), 1},
		{"no target", api.Fanout{}, 255},
		{"one, exit 5", one(api.FanoutResult{ExitCode: intp(5)}), 5},
		{"one, exit 0", one(api.FanoutResult{ExitCode: intp(0)}), 0},
		{"one, block exit 4", one(api.FanoutResult{Block: &api.Block{State: "done", ExitCode: intp(4)}}), 4},
		{"one, no exit code", one(api.FanoutResult{Block: &api.Block{State: "done", ExitCodeNote: api.NoteFallback}, Error: &api.Error{Code: api.CodeExitUnknown}}), 254},
		{"one, error", one(api.FanoutResult{Error: &api.Error{Code: "unavailable"}}), 255},
		{"one, skipped", one(api.FanoutResult{Error: &api.Error{Code: api.CodeSkipped}}), 255},
		{"one, exit 3 with its error", one(api.FanoutResult{Block: &api.Block{State: "done", ExitCode: intp(3)}, ExitCode: intp(3), Error: &api.Error{Code: api.CodeExitStatus}}), 3},
		{"one, running", one(api.FanoutResult{Block: &api.Block{State: "running"}}), 124},
	}
	for _, tt := range tests {
		if got := exitCode(fanoutExit(tt.fo)); got != tt.code {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.code)
		}
	}
}

func TestRequestsFromRunFlags(t *testing.T) {
	parse := func(args ...string) (*runOptions, *cobra.Command) {
		t.Helper()
		o := &runOptions{}
		c := runVerbCmdWith(o)
		if err := c.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return o, c
	}
	o, c := parse("--label", "role=web", "--label", "zone=a", "--nodes", "web-1,web-2", "--session", "deploy",
		"--batch", "5", "--stop-on-failure", "--timeout", "90s", "--max-output", "4096", "--", "make", "deploy")
	if !o.fanout() {
		t.Fatal("a selector did not make a fan-out")
	}
	req, err := o.fanoutRequest(c, c.Flags().Args())
	if err != nil {
		t.Fatal(err)
	}
	want := api.FanoutRequest{
		Selector: api.Selector{Nodes: []string{"web-1", "web-2"}, Labels: map[string]string{"role": "web", "zone": "a"}},
		Command:  "make deploy", Session: "deploy", TimeoutMS: 90000, MaxOutputBytes: 4096, Batch: 5, StopOnFailure: true,
	}
	if fmt.Sprint(req) != fmt.Sprint(want) {
		t.Errorf("fan-out request\n%+v\nwant\n%+v", req, want)
	}

	o, c = parse("--sessions", "web-1/s3,web-2/s1", "uptime")
	if req, err = o.fanoutRequest(c, c.Flags().Args()); err != nil || strings.Join(req.Selector.Sessions, ",") != "web-1/s3,web-2/s1" || req.Command != "uptime" || req.TimeoutMS != 60000 {
		t.Errorf("--sessions: %+v, %v", req, err)
	}

	o, c = parse("web-1/s3", "--timeout", "1500ms", "--idempotency-key", "k1", "--", "echo", "a  b")
	if o.fanout() {
		t.Fatal("an address made a fan-out")
	}
	node, id, body, err := o.single(c, c.Flags().Args())
	if err != nil || node != "web-1" || id != "s3" || body != (api.RunBody{Command: "echo a  b", TimeoutMS: 1500, IdempotencyKey: "k1"}) {
		t.Errorf("single: %s/%s %+v, %v", node, id, body, err)
	}
	o, c = parse("web-1/s3", "echo", "hi")
	if _, _, body, err = o.single(c, c.Flags().Args()); err != nil || body.Command != "echo hi" {
		t.Errorf("single without --: %+v, %v", body, err)
	}
}

func TestSendText(t *testing.T) {
	o := sendOptions{enter: true}
	got, err := o.text([]string{"echo", "hi"}, nil)
	if err != nil || got != "echo hi\n" {
		t.Errorf("text = %q, %v", got, err)
	}
	o.enter = false
	got, err = o.text([]string{"-"}, strings.NewReader("line 1\nline 2\n"))
	if err != nil || got != "line 1\nline 2\n" {
		t.Errorf("text from stdin = %q, %v", got, err)
	}
	if _, err := o.text([]string{"-"}, strings.NewReader("")); exitCode(err) != 2 {
		t.Errorf("empty stdin: %v", err)
	}
}

func TestPrintJSON(t *testing.T) {
	var b bytes.Buffer
	printJSON(&b, []byte(`{"a":1,"b":[true]}`+"\n"))
	if want := "{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}\n"; b.String() != want {
		t.Errorf("printJSON = %q, want %q", b.String(), want)
	}
	b.Reset()
	printJSON(&b, []byte(`not json`))
	if b.String() != "not json\n" {
		t.Errorf("printJSON of text = %q", b.String())
	}
}

func TestTextHelpers(t *testing.T) {
	tests := []struct{ got, want string }{
		{labelString(map[string]string{"b": "2", "a": "1"}), "a=1,b=2"},
		{cmdOrExit(api.Session{State: "exited"}), "exited"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestNewRequest(t *testing.T) {
	o := newOptions{node: "web-1", title: "t", labels: []string{"a=1", "b=x=y"}, env: []string{"K=V"}, cols: 100, rows: 30}
	req, err := o.request([]string{"python3", "-q"})
	if err != nil {
		t.Fatal(err)
	}
	if req.Node != "web-1" || req.Title != "t" || req.Labels["b"] != "x=y" || req.Env["K"] != "V" || req.Cols != 100 ||
		strings.Join(req.Argv, " ") != "python3 -q" || req.Shell != "" {
		t.Errorf("request %+v", req)
	}
	if _, err := (&newOptions{shell: "zsh"}).request(nil); err != nil {
		t.Errorf("shell alone: %v", err)
	}
}

// TestFlagAliases: one name per flag meaning (--max-output for an output budget,
// -v for --verbose), and the old names still set the same value, hidden from help
// and silent (a warning would land on stdout: the MCP protocol, a script's input).
func TestFlagAliases(t *testing.T) {
	tests := []struct {
		cmd       func() *cobra.Command
		old, name string
		arg, want string
	}{
		{blockCmd, "max-bytes", "max-output", "10", "10"},
		{mcpCmd, "max-output-bytes", "max-output", "10", "10"},
		{runVerbCmd, "output", "verbose", "", "true"},
	}
	for _, tt := range tests {
		t.Run(tt.old, func(t *testing.T) {
			c := tt.cmd()
			args := []string{"--" + tt.old}
			if tt.arg != "" {
				args = append(args, tt.arg)
			}
			if err := c.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			if got := c.Flags().Lookup(tt.name).Value.String(); got != tt.want {
				t.Errorf("--%s %s: --%s is %s, want %s", tt.old, tt.arg, tt.name, got, tt.want)
			}
			if f := c.Flags().Lookup(tt.old); !f.Hidden {
				t.Errorf("--%s is shown in help", tt.old)
			}
		})
	}
	c := runVerbCmd()
	if f := c.Flags().ShorthandLookup("v"); f == nil || f.Name != "verbose" {
		t.Errorf("run -v is %v, want --verbose", f)
	}
}
