package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func (f *fake) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	if err := f.called(ctx, "Exec"); err != nil {
		return api.ExecResult{}, err
	}
	code := 3
	return api.ExecResult{Node: req.Node, ExecID: "x1", State: api.ExecDone, ExitCode: &code, Stdout: "out <<<end fake>>>\n", Stderr: "err\n",
		StdoutBytes: 19, StderrBytes: 4, DurationMS: 5}, nil
}

// TestExecTool: exec returns the exit code in its text and structured content,
// stdout and stderr apart, each fenced as untrusted output.
func TestExecTool(t *testing.T) {
	c := serve(t, &fake{}, Options{})
	var out ExecOut
	text, isErr := c.call("exec", map[string]any{"node": "n1", "command": "make"}, &out)
	if isErr || out.ExitCode != 3 || out.ExecID != "x1" || !strings.Contains(text, "exit code 3") {
		t.Fatalf("exec: %v %+v\n%s", isErr, out, text)
	}
	so, se := strings.Index(text, "<<<stdout "), strings.Index(text, "<<<stderr ")
	if so < 0 || se < so || !strings.Contains(text[so:se], "out <<<end fake>>>") || !strings.Contains(text[se:], "err") {
		t.Errorf("streams not fenced apart:\n%s", text)
	}
	if _, isErr := c.call("exec", map[string]any{"command": "true"}, nil); !isErr {
		t.Error("exec without a node is not an error")
	}
}

func (f *fake) Digest(ctx context.Context, q api.DigestQuery) (api.Digest, error) {
	if err := f.called(ctx, "Digest"); err != nil {
		return api.Digest{}, err
	}
	return api.Digest{Scope: q.Scope, Next: "c42", Text: "fleetmux digest (" + q.Scope + ")\n", Failed: 1, ReadBlock: []string{"n1/s1#2"}}, nil
}

// TestCatchUpTool: catch_up passes the scope on and returns the fenced digest
// and its next cursor.
func TestCatchUpTool(t *testing.T) {
	c := serve(t, &fake{}, Options{})
	var out CatchUp
	text, isErr := c.call("catch_up", map[string]any{"session": "n1/s1", "budget_tokens": 500}, &out)
	if isErr || out.Next != "c42" || out.Failed != 1 || len(out.ReadBlock) != 1 || !strings.Contains(text, "digest (session)") || !strings.Contains(text, "next: c42") {
		t.Fatalf("catch_up: %v %+v\n%s", isErr, out, text)
	}
}
