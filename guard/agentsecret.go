package guard

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// AgentSecrets reads the stored secrets an agent's spawn asks for (env: the
// environment variable → the secret's name) when the policy in force lets w have
// each in the environment of an agent of driver (policy.Policy.AgentSecret: an
// entry of that name listing "agent:DRIVER" among its programs). It returns env →
// value, for that agent's environment only: the caller never logs, replies,
// records or audits a value (the spawn's audit names the secrets). Refused: an
// *api.Error of code denied naming the first secret not allowed, or bad_request
// for a variable a shell or the loader would execute; not_found for a secret not
// stored on the node.
func (g *Guard) AgentSecrets(ctx context.Context, w Writer, driver string, env map[string]string) (map[string]string, error) {
	if len(env) == 0 {
		return nil, nil
	}
	if err := g.Loaded(ctx); err != nil {
		return nil, err
	}
	p := g.Policy()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(env))
	for _, k := range keys {
		name := env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") || CodeEnv(k) || api.SecretEnv(k) {
			return nil, api.Errorf(api.CodeBadRequest, "secret for %q: not an environment variable an agent's key may go in", k)
		}
		if err := api.ValidName(name); err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "secret name for %s: %v", k, err)
		}
		if !p.AgentSecret(name, g.cfg.Node, w.Principal, w.Role, driver) {
			var v uint64
			if p != nil {
				v = p.Version
			}
			return nil, &api.Error{Code: api.CodeDenied, Message: "secret " + name + ": no secrets entry of the policy (version " +
				strconv.FormatUint(v, 10) + ") lets " + w.Principal + " give it to a " + driver + " agent on node " + g.cfg.Node + " (programs: ['agent:" + driver + "'])"}
		}
		value, err := g.readSecret(name)
		if err != nil {
			return nil, api.Errorf(api.CodeNotFound, "no secret %s on node %s", name, g.cfg.Node)
		}
		out[k] = string(value)
		clear(value)
	}
	return out, nil
}
