package node

import (
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/session"
)

// Conversions from the session package's types to wire types.

func toSession(node, id string, in session.Info) api.Session {
	return api.Session{
		Node: node, ID: id, Title: in.Title, Description: in.Description, Labels: in.Labels,
		Shell: in.Shell, Argv: in.Argv, State: string(in.State), CurrentCommand: in.CurrentCommand,
		Cwd: in.Cwd, LastExitCode: in.LastExitCode, ExitCode: in.ExitCode, Cols: in.Cols, Rows: in.Rows,
		Pid: in.Pid, OutputOffset: in.OutputOffset, CreatedAt: in.CreatedAt,
		WaitingInput: in.WaitingInput, Echo: in.Echo, Blocks: in.Blocks, Integration: string(in.Integration),
		Sandbox: in.Sandbox,
	}
}

func toBlock(b session.Block) api.Block {
	out := api.Block{
		N: b.N, Command: b.Command, Cwd: b.Cwd, State: string(b.State), ExitCode: b.ExitCode,
		StartedAt: b.StartedAt, Start: b.Start, End: b.End, Fallback: b.Fallback, ExitCodeNote: b.Note,
	}
	if !b.FinishedAt.IsZero() {
		t := b.FinishedAt
		out.FinishedAt = &t
	}
	return out
}

// result is a run's result on e's session as the API shows it.
func (e *entry) result(r session.Result) api.BlockResult {
	return api.BlockResult{
		Block: toBlock(r.Block), Text: r.Text, OmittedBytes: r.OmittedBytes, LostBytes: r.LostBytes,
		Session: e.wire(r.Session),
	}
}

// publishJSON publishes v as JSON; a failure is the subscribers' gap, never the caller's.
func publishJSON(bus Bus, subject string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	_ = bus.Publish(subject, nil, b)
}

// auditRecord encodes the record of a mutating request (nil if it cannot).
func (n *Node) auditRecord(req request, out any, aerr *api.Error) []byte {
	rec := api.AuditRecord{Time: req.at, Node: n.cfg.Name, Actor: req.actor, Principal: req.principal, Role: req.role, Controller: req.controller,
		Claimed: truncate(req.label, 256), Action: req.verb, Result: "ok", TraceID: req.traceID}
	var probe struct {
		Session string            `json:"session"`
		Command string            `json:"command"`
		Keys    []string          `json:"keys"`
		Data    string            `json:"data"`
		Argv    []string          `json:"argv"`
		Env     map[string]string `json:"env"`
		Agent   string            `json:"agent"`  // the agent verbs
		Driver  string            `json:"driver"` // agent_spawn
		Text    string            `json:"text"`   // agent_send
	}
	_ = json.Unmarshal(req.data, &probe)
	rec.Session = probe.Session
	if probe.Agent != "" {
		rec.Session = probe.Agent
	}
	switch {
	case probe.Driver != "":
		rec.Detail = truncate(spawnDetail(req.data, n.redactText), 512)
	case probe.Text != "":
		rec.Detail = "prompt of " + itoa(len(probe.Text)) + " bytes"
	case probe.Command != "":
		rec.Detail = truncate(n.redactText(probe.Command), 512) // redacted whole, then cut
	case len(probe.Keys) > 0:
		b, _ := json.Marshal(probe.Keys)
		rec.Detail = "keys " + truncate(string(b), 256)
	case len(probe.Argv) > 0 || len(probe.Env) > 0: // create: what was decided (env: the names only)
		var d string
		if len(probe.Argv) > 0 {
			d = "argv " + n.redactText(guard.ArgvCommand(probe.Argv))
		}
		if len(probe.Env) > 0 {
			keys := make([]string, 0, len(probe.Env))
			for k := range probe.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			d = strings.TrimSpace(d + " env " + strings.Join(keys, ","))
		}
		rec.Detail = truncate(d, 512)
	case probe.Data != "":
		rec.Detail = "input of " + itoa(len(probe.Data)) + " bytes"
	}
	if t, ok := out.(api.TakeOver); ok && t.Previous != nil {
		rec.Detail = "from " + truncate(t.Previous.Principal, 256)
	}
	if s, ok := out.(api.Session); ok && rec.Session == "" {
		rec.Session = s.ID
	}
	if s, ok := out.(api.Session); ok && s.Sandbox != nil {
		rec.Detail = strings.TrimSpace(rec.Detail + " sandbox " + s.Sandbox.Name)
	}
	if x, ok := out.(api.ExecResult); ok {
		rec.Detail = truncate("exec "+x.ExecID+" "+rec.Detail, 512)
	}
	if a, ok := out.(api.Agent); ok && rec.Session == "" {
		rec.Session = a.ID
	}
	if aerr != nil {
		rec.Result, rec.Error = aerr.Code, truncate(n.redactText(aerr.Message), 512)
	}
	req.decision.Fill(&rec)
	return marshalRecord(rec)
}

// marshalRecord encodes an audit record (nil if it cannot be: nothing is published).
func marshalRecord(rec api.AuditRecord) []byte {
	if !utf8.ValidString(rec.Detail) {
		rec.Detail = "(not UTF-8)"
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil
	}
	return b
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
