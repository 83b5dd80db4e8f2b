package policy

// Sandbox profiles (DESIGN.md "Sandboxes"): named profiles and the rules that
// choose one for a new session.
//
//	sandboxes:
//	  profiles:
//	    workonly:
//	      files: {write: [/srv/work], hide: [/root, /home], rest: read}
//	      network: none            # none | full | {connect_tcp: [443, 5432]}
//	      limits: {memory: 256MiB, pids: 64, cpu: 0.5}
//	  rules:                        # the first whose match fits picks the profile
//	    - match: {principal: 'token:ci*'}
//	      profile: workonly
//	  default: none                 # no rule fits: no profile
//	  agent_default: workonly       # no rule fits an agent's session: this one
//
// A rule's match takes principal, role, node, node_labels, session_labels and
// agent (the driver of an agent's session; such a rule fits no other session).

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fleetmux/fleetmux/api"
)

// Limits of the sandboxes section.
const (
	MaxProfiles     = 64
	MaxSandboxRules = 256
)

// NoProfile is the profile word for "no profile" (default: none).
const NoProfile = "none"

// Errors of Policy.Sandbox.
var (
	// ErrUnknownProfile: create asked for a profile the policy does not define.
	ErrUnknownProfile = errors.New("no such sandbox profile")
	// ErrLooser: create asked for a profile that allows more than the chosen one.
	ErrLooser = errors.New("sandbox profile is looser than the policy's choice")
)

// Sandboxes is the policy's sandboxes section.
type Sandboxes struct {
	Profiles map[string]*api.SandboxProfile
	Rules    []SandboxRule
	// Default names the profile when no rule fits ("" for none).
	Default string
	// AgentDefault, when set, names the profile of an agent's session when no
	// rule fits, instead of Default (NoProfile: none).
	AgentDefault string
}

// SandboxRule picks Profile ("" for none) for the sessions its match fits.
type SandboxRule struct {
	Match   Match
	Profile string
	Line    int
}

// Sandbox chooses the profile of a new session asked for by req (Principal,
// Role, Node, NodeLabels, SessionLabels, and Agent for an agent's session):
// the first fitting rule's, else the default. asked, when not empty, is a
// profile create named: it is used instead when it is at least as strict as the
// choice (ErrLooser otherwise; ErrUnknownProfile when the policy has no such
// profile). nil, nil: no profile. A nil policy chooses none and knows none.
func (p *Policy) Sandbox(req Request, asked string) (*api.SandboxProfile, error) {
	var s *Sandboxes
	if p != nil {
		s = p.Sandboxes
	}
	var chosen *api.SandboxProfile
	if s != nil {
		name := s.Default
		if req.Agent != "" && s.AgentDefault != "" {
			name = s.AgentDefault
		}
		for i := range s.Rules {
			if s.Rules[i].Match.fitsSession(req) {
				name = s.Rules[i].Profile
				break
			}
		}
		chosen = s.Profiles[name]
	}
	if asked == "" || asked == NoProfile && chosen == nil {
		return chosen, nil
	}
	var want *api.SandboxProfile
	if s != nil {
		want = s.Profiles[asked]
	}
	if want == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProfile, asked)
	}
	if chosen != nil && !want.AtLeastAsStrict(chosen) {
		return nil, fmt.Errorf("%w: %s allows more than %s", ErrLooser, want.Name, chosen.Name)
	}
	return want, nil
}

// fitsSession is Match.fits for a session's creation: no command, and agent
// matches the session's agent driver.
func (m *Match) fitsSession(req Request) bool {
	if m.agent != nil && (req.Agent == "" || !m.agent.MatchString(req.Agent)) {
		return false
	}
	if m.Role != "" && req.Role != m.Role {
		return false
	}
	if m.principal != nil && !m.principal.MatchString(req.Principal) {
		return false
	}
	if m.node != nil && !m.node.MatchString(req.Node) {
		return false
	}
	return labelsFit(m.nodeLabels, req.NodeLabels) && labelsFit(m.sessionLabels, req.SessionLabels)
}

func (p *parser) sandboxes(n *yaml.Node) *Sandboxes {
	s := &Sandboxes{Profiles: map[string]*api.SandboxProfile{}}
	var rules *yaml.Node
	for _, kv := range p.mapping(n, "sandboxes", "profiles", "rules", "default", "agent_default") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "profiles":
			pkvs := p.mapping(v, "sandboxes.profiles")
			if len(pkvs) > MaxProfiles {
				p.fail(v, "sandboxes.profiles", "%d profiles, more than %d", len(pkvs), MaxProfiles)
				return nil
			}
			for _, pkv := range pkvs {
				if p.err != nil {
					return nil
				}
				prof := p.profile(pkv[0], pkv[1])
				if prof != nil {
					s.Profiles[prof.Name] = prof
				}
			}
		case "rules":
			rules = v
		case "default":
			s.Default = p.str(v, "sandboxes.default")
		case "agent_default":
			s.AgentDefault = p.str(v, "sandboxes.agent_default")
		}
	}
	if p.err != nil {
		return nil
	}
	known := func(n *yaml.Node, field, name string) string {
		if name == NoProfile {
			return ""
		}
		if _, ok := s.Profiles[name]; !ok && p.err == nil {
			p.fail(n, field, "no profile %q (profiles: %s, or none)", name, strings.Join(profileNames(s), ", "))
		}
		return name
	}
	if n := findKey(n, "default"); n != nil {
		s.Default = known(n, "sandboxes.default", s.Default)
	}
	if n := findKey(n, "agent_default"); n != nil {
		if s.AgentDefault == NoProfile {
			s.AgentDefault = NoProfile // none, not the default
		} else {
			s.AgentDefault = known(n, "sandboxes.agent_default", s.AgentDefault)
		}
	}
	for i, rn := range p.seq(orNull(rules), "sandboxes.rules", MaxSandboxRules) {
		field := fmt.Sprintf("sandboxes.rules[%d]", i)
		r := SandboxRule{Line: rn.Line}
		have := false
		for _, kv := range p.mapping(rn, field, "match", "profile") {
			switch kv[0].Value {
			case "match":
				r.Match = p.sessionMatch(kv[1], field+".match")
			case "profile":
				r.Profile, have = known(kv[1], field+".profile", p.str(kv[1], field+".profile")), true
			}
		}
		if p.err == nil && !have {
			p.fail(rn, field+".profile", "missing")
		}
		s.Rules = append(s.Rules, r)
	}
	return s
}

// sessionMatch is a match of a sandbox rule: only what a session's creation has.
func (p *parser) sessionMatch(n *yaml.Node, field string) Match {
	for _, kv := range p.mapping(n, field, "principal", "role", "node", "node_labels", "session_labels", "agent") {
		_ = kv
	}
	if p.err != nil {
		return Match{}
	}
	return p.match(n, field)
}

func (p *parser) profile(k, v *yaml.Node) *api.SandboxProfile {
	field := join("sandboxes.profiles", k.Value)
	prof := &api.SandboxProfile{Name: k.Value, Network: api.SandboxNetwork{Mode: api.NetworkFull}}
	if err := api.ValidName(k.Value); err != nil {
		p.fail(k, field, "bad profile name: %v", err)
		return nil
	}
	if k.Value == NoProfile {
		p.fail(k, field, "%q means no profile", NoProfile)
		return nil
	}
	for _, kv := range p.mapping(v, field, "files", "network", "limits") {
		f := join(field, kv[0].Value)
		switch kv[0].Value {
		case "files":
			for _, fkv := range p.mapping(kv[1], f, "read", "write", "hide", "rest") {
				ff := join(f, fkv[0].Value)
				switch fkv[0].Value {
				case "read":
					prof.Files.Read = p.paths(fkv[1], ff)
				case "write":
					prof.Files.Write = p.paths(fkv[1], ff)
				case "hide":
					prof.Files.Hide = p.paths(fkv[1], ff)
				case "rest":
					prof.Files.Rest = p.str(fkv[1], ff)
				}
			}
		case "network":
			if kv[1].Kind == yaml.ScalarNode {
				prof.Network.Mode = p.str(kv[1], f)
				if p.err == nil && prof.Network.Mode == api.NetworkTCP {
					p.fail(kv[1], f, "tcp takes ports: {connect_tcp: [443]}")
				}
				break
			}
			prof.Network.Mode = api.NetworkTCP
			for _, nkv := range p.mapping(kv[1], f, "connect_tcp") {
				for _, pn := range p.seq(nkv[1], f+".connect_tcp", api.MaxSandboxPorts) {
					port, err := strconv.Atoi(p.str(pn, f+".connect_tcp"))
					if p.err == nil && (err != nil || port < 1 || port > 65535) {
						p.fail(pn, f+".connect_tcp", "bad port %q", pn.Value)
					}
					prof.Network.Ports = append(prof.Network.Ports, port)
				}
			}
		case "limits":
			for _, lkv := range p.mapping(kv[1], f, "memory", "pids", "cpu") {
				lf := join(f, lkv[0].Value)
				s := p.str(lkv[1], lf)
				if p.err != nil {
					return nil
				}
				var err error
				switch lkv[0].Value {
				case "memory":
					prof.Limits.MemoryBytes, err = parseBytes(s)
				case "pids":
					prof.Limits.Pids, err = strconv.Atoi(s)
				case "cpu":
					prof.Limits.CPU, err = strconv.ParseFloat(s, 64)
				}
				if err != nil {
					p.fail(lkv[1], lf, "bad value %q", s)
				}
			}
		}
	}
	if p.err != nil {
		return nil
	}
	if err := prof.Validate(); err != nil {
		p.fail(v, field, "%v", err)
		return nil
	}
	return prof
}

func (p *parser) paths(n *yaml.Node, field string) []string {
	var out []string
	for _, pn := range p.seq(n, field, api.MaxSandboxPaths) {
		out = append(out, p.str(pn, field))
	}
	return out
}

// parseBytes reads "268435456", "256MiB", "256M", "1GiB", "512KiB".
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("bad size")
	}
	return n * mult, nil
}

func profileNames(s *Sandboxes) []string {
	var names []string
	for n := range s.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func findKey(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func orNull(n *yaml.Node) *yaml.Node {
	if n == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return n
}
