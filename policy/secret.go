package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fleetmux/fleetmux/api"
)

// Secrets (DESIGN.md "Guardrails", sudo without handing out the password): an admin
// stores a secret on a node (`fleetmux secret set NODE NAME`); a policy entry says
// who may have the node type it, where, and at which prompt:
//
//	secrets:
//	  - name: sudo-web          # the stored secret's name
//	    roles: [operator, admin]  # writers with one of these roles may use it,
//	    principals: ['token:deploy']  # or with a principal fitting one of these globs
//	    nodes: 'web-*'          # glob on the node's name (default: every node)
//	    programs: [sudo]        # the program asking (default: sudo)
//	    prompt: '(?i)password for [^:]*: ?$'  # RE2 on the prompt line (default DefaultSecretPrompt)
//
// The node types the secret (and Enter) only when the session's foreground
// program waits for input with echo off, is one of programs running set-user-ID
// (a program the user could have written cannot pass for it), and the last output
// line matches prompt; and only when the session's writer (the lease holder) may use
// the secret. The first entry that fits decides.

// Limits of the secrets of a policy.
const (
	// MaxSecrets bounds a policy's secret entries.
	MaxSecrets = 64
	// maxSecretPrograms bounds an entry's programs, maxSecretPrincipals its principals.
	maxSecretPrograms   = 8
	maxSecretPrincipals = 32
)

// DefaultSecretPrompt is a secret entry's prompt when none is given: sudo's
// "[sudo] password for bob: " and the like (su, passwd, doas).
const DefaultSecretPrompt = `(?i)(^|[\s\]])password( for [^:]{1,64})?: ?$`

// DefaultSecretProgram is the program an entry without programs accepts.
const DefaultSecretProgram = "sudo"

// Secret is one secrets entry of a policy.
type Secret struct {
	Name       string   // the stored secret's name (api.ValidName)
	Roles      []string // writers with one of these roles may use it (operator, admin)
	Principals []string // or writers whose principal fits one of these globs
	Nodes      string   // glob on the node's name; "" means every node
	Programs   []string // names of the programs that may ask for it (default DefaultSecretProgram)
	Prompt     string   // RE2 on the prompt line (default DefaultSecretPrompt)
	Line       int      // the entry's line in the document, for messages

	prompt     *regexp.Regexp
	nodes      *regexp.Regexp
	principals []*regexp.Regexp
}

// SecretRequest is a prompt the node may answer with a secret.
type SecretRequest struct {
	Node      string // the node's name
	Principal string // the session's writer (the lease holder): its principal
	Role      string // and its role
	Program   string // the program asking (its executable's base name)
	Prompt    string // the prompt line: the last line of output, without colours
}

// SecretFor returns the first secrets entry that lets req's writer have the secret
// typed at req's prompt, and whether there is one. A nil *Policy has none.
func (p *Policy) SecretFor(req SecretRequest) (Secret, bool) {
	if p == nil {
		return Secret{}, false
	}
	for _, s := range p.Secrets {
		if s.fits(req) {
			return s, true
		}
	}
	return Secret{}, false
}

func (s *Secret) fits(req SecretRequest) bool {
	if s.nodes != nil && !s.nodes.MatchString(req.Node) {
		return false
	}
	programs := s.Programs
	if len(programs) == 0 {
		programs = []string{DefaultSecretProgram}
	}
	if !slices.Contains(programs, req.Program) || !s.prompt.MatchString(req.Prompt) {
		return false
	}
	if slices.Contains(s.Roles, req.Role) && api.RoleAtLeast(req.Role, api.RoleOperator) {
		return true
	}
	for _, g := range s.principals {
		if g.MatchString(req.Principal) && api.RoleAtLeast(req.Role, api.RoleOperator) {
			return true
		}
	}
	return false
}

func (p *parser) secrets(n *yaml.Node) []Secret {
	names := map[string]int{}
	var out []Secret
	for i, sn := range p.seq(n, "secrets", MaxSecrets) {
		field := fmt.Sprintf("secrets[%d]", i)
		s := Secret{Line: sn.Line, Prompt: DefaultSecretPrompt}
		for _, kv := range p.mapping(sn, field, "name", "roles", "principals", "nodes", "programs", "prompt") {
			k, v := kv[0], kv[1]
			f := join(field, k.Value)
			switch k.Value {
			case "name":
				s.Name = p.str(v, f)
				if err := api.ValidName(s.Name); p.err == nil && err != nil {
					p.fail(v, f, "%v", err)
				}
			case "roles":
				s.Roles = p.secretRoles(v, f)
			case "principals":
				for j, g := range p.seq(v, f, maxSecretPrincipals) {
					src, re := p.glob(g, fmt.Sprintf("%s[%d]", f, j))
					s.Principals, s.principals = append(s.Principals, src), append(s.principals, re)
				}
			case "nodes":
				s.Nodes, s.nodes = p.glob(v, f)
			case "programs":
				for j, g := range p.seq(v, f, maxSecretPrograms) {
					ff := fmt.Sprintf("%s[%d]", f, j)
					prog := p.str(g, ff)
					if p.err == nil && (prog == "" || prog != path.Base(prog) || strings.ContainsAny(prog, " \t")) {
						p.fail(g, ff, "%q: want a program's name without a directory (e.g. sudo)", prog)
					}
					s.Programs = append(s.Programs, prog)
				}
			case "prompt":
				s.Prompt = p.pattern(v, f)
			}
		}
		if p.err != nil {
			return nil
		}
		switch {
		case s.Name == "":
			p.fail(sn, field+".name", "missing")
		case names[s.Name] != 0:
			p.fail(sn, field+".name", "secret %q already has an entry at line %d", s.Name, names[s.Name])
		case len(s.Roles) == 0 && len(s.Principals) == 0:
			p.fail(sn, field, "names neither roles nor principals: nobody could use it")
		}
		if p.err != nil {
			return nil
		}
		names[s.Name] = sn.Line
		re, err := regexp.Compile(s.Prompt)
		if err != nil {
			p.fail(sn, field+".prompt", "bad regexp: %v", err)
			return nil
		}
		s.prompt = re
		out = append(out, s)
	}
	return out
}

// secretRoles reads a secret entry's roles: operator or admin, each once (viewers
// never write into a session, so never have a secret typed).
func (p *parser) secretRoles(n *yaml.Node, field string) []string {
	var out []string
	for i, v := range p.seq(n, field, 2) {
		f := fmt.Sprintf("%s[%d]", field, i)
		role := p.str(v, f)
		switch {
		case p.err != nil:
			return nil
		case role == api.RoleViewer:
			p.fail(v, f, "viewers never write into a session (want %s or %s)", api.RoleOperator, api.RoleAdmin)
		case !validRole(role):
			p.fail(v, f, "unknown role %q (want %s or %s)", role, api.RoleOperator, api.RoleAdmin)
		case slices.Contains(out, role):
			p.fail(v, f, "role %q given twice", role)
		}
		out = append(out, role)
	}
	return out
}
