package guard

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// CheckExec decides a one-shot exec (DESIGN "Exec") before anything starts, as
// a new session's argv and environment are decided (create.go): argv as the
// command line it is, shell-quoted and joined, and the script of a shell's -c on
// its own too, the strictest decision winning; environment variables a shell or
// the loader runs are refused while a policy is in force. Deny: CodeDenied naming
// the rule. Approve: refused (CodeDenied, naming the rule that would hold it and
// saying that approvals are for sessions): run it in a session instead, where it
// can wait for a person. The decision goes into slot (the request's audit record).
func (g *Guard) CheckExec(ctx context.Context, w Writer, argv []string, env map[string]string, slot *Decision) error {
	if err := g.Loaded(ctx); err != nil {
		return err
	}
	p := g.Policy()
	if p == nil {
		return nil
	}
	var bad []string
	for k := range env {
		if CodeEnv(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		slot.set(policy.Decision{Action: api.ActionDeny, Rule: CodeEnvRule, Version: p.Version})
		return &api.Error{Code: api.CodeDenied, Rule: CodeEnvRule,
			Message: "denied: an exec's environment may not set " + strings.Join(bad, ", ") +
				" while a policy is in force on node " + g.cfg.Node + " (a shell or the loader runs what they name, which no rule decides): nothing was started"}
	}
	command := ArgvCommand(argv)
	d := g.decide(nil, w, command, nil)
	if script, ok := shellScript(argv); ok {
		if ds := g.decide(nil, w, script, nil); stricter(ds, d) {
			d = ds
		}
	}
	slot.set(d)
	switch d.Action {
	case api.ActionAllow:
		return nil
	case api.ActionApprove:
		return &api.Error{Code: api.CodeDenied, Rule: d.Rule,
			Message: "rule " + quoteRule(d.Rule) + " of the policy (version " + strconv.FormatUint(d.Version, 10) + ") on node " + g.cfg.Node +
				" needs a person's approval, and approvals are for sessions: run it in a session (run), where it waits for the decision; nothing was started"}
	}
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule,
		Message: "denied by rule " + quoteRule(d.Rule) + " of the policy (version " + strconv.FormatUint(d.Version, 10) + ") on node " + g.cfg.Node + ": nothing was started"}
}
