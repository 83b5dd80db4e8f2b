package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The exec tool (DESIGN "Exec"): a one-shot process on a node without a
// terminal, stdout and stderr apart.

// ExecFleet is what the exec tool needs of the fleet (part of Fleet).
type ExecFleet interface {
	Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error)
}

type execIn struct {
	Node           string   `json:"node"`
	Command        string   `json:"command,omitempty" jsonschema:"sh -c; or argv"`
	Argv           []string `json:"argv,omitempty"`
	Cwd            string   `json:"cwd,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
	TimeoutMS      int      `json:"timeout_ms,omitempty"`
	MaxOutputBytes int      `json:"max_output_bytes,omitempty"`
}

// ExecOut is the exec tool's structured content.
type ExecOut struct {
	Node     string `json:"node"`
	ExecID   string `json:"exec_id"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out"`
}

func (m *Server) addExecTool() {
	addTool(m, &mcp.Tool{
		Name:        "exec",
		Description: "Run a process on a node without a terminal (no session) and wait: exit code, stdout and stderr apart.",
		Annotations: annRun("Run a process"),
		InputSchema: schemaOf[execIn](func(p map[string]*jsonschema.Schema) { minimum(p, 0, "timeout_ms", "max_output_bytes") }),
	}, func(in execIn) (string, string) {
		what := in.Command
		if what == "" {
			what = strings.Join(in.Argv, " ")
		}
		return in.Node, api.OneLine(what, 200)
	}, func(ctx context.Context, in execIn) (*mcp.CallToolResult, ExecOut, error) {
		if in.Node == "" || api.ValidName(in.Node) != nil {
			return nil, ExecOut{}, toolErrf("node is required: call list_nodes")
		}
		ms, err := checkTimeout(in.TimeoutMS)
		if err != nil {
			return nil, ExecOut{}, err
		}
		req := api.ExecRequest{Node: in.Node, Command: in.Command, Argv: in.Argv, Cwd: in.Cwd, TimeoutMS: ms, MaxOutputBytes: in.MaxOutputBytes}
		if req.MaxOutputBytes == 0 {
			req.MaxOutputBytes = m.budget(0) / 2
		}
		if in.Stdin != "" {
			req.Stdin = &in.Stdin
		}
		res, err := m.f.Exec(ctx, req)
		if err != nil {
			return nil, ExecOut{}, m.explain(err, in.Node, "")
		}
		out := ExecOut{Node: res.Node, ExecID: res.ExecID, Signal: res.Signal, TimedOut: res.TimedOut}
		head := fmt.Sprintf("%s exec %s: ", res.Node, res.ExecID)
		if res.ExitCode != nil {
			out.ExitCode = *res.ExitCode
			head += fmt.Sprintf("exit code %d", *res.ExitCode)
		}
		if res.Signal != "" {
			head += " (" + res.Signal + ")"
		}
		if res.TimedOut {
			head += fmt.Sprintf(", killed at its timeout (%d ms): the output so far", ms)
		}
		head += fmt.Sprintf(", %d ms\nstdout (%d bytes, %d omitted):\n%s\nstderr (%d bytes, %d omitted):\n%s", res.DurationMS,
			res.StdoutBytes, res.StdoutOmitted, fence("stdout", res.Stdout), res.StderrBytes, res.StderrOmitted, fence("stderr", res.Stderr))
		return textResult(head), out, nil
	})
}
