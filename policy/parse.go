package policy

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fleetmux/fleetmux/api"
)

// Parse parses and validates a policy document (YAML, or JSON). Its errors are *Error
// values naming the line and the field, and wrap ErrInvalid. Unknown fields, anchors
// and aliases, duplicate keys and duplicate names are refused.
func Parse(doc []byte) (*Policy, error) {
	if len(doc) > MaxBytes {
		return nil, &Error{Msg: fmt.Sprintf("the document has %d bytes, more than %d", len(doc), MaxBytes)}
	}
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, &Error{Msg: "the document is empty"}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&root); err != nil {
		return nil, &Error{Msg: "not YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{Line: extra.Line, Msg: "more than one document"}
	}
	p := &parser{}
	p.noAliases(&root)
	if p.err != nil {
		return nil, p.err
	}
	pol := p.document(&root)
	if p.err != nil {
		return nil, p.err
	}
	return pol, nil
}

// parser walks the YAML node tree; err is the first problem found.
type parser struct{ err *Error }

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	if p.err == nil {
		line := 0
		if n != nil {
			line = n.Line
		}
		p.err = &Error{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

// mapping returns the key/value pairs of a mapping node, refusing duplicates, aliases
// and keys not in allowed.
func (p *parser) mapping(n *yaml.Node, field string, allowed ...string) [][2]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.fail(n, field, "want a mapping, got %s", kind(n))
		return nil
	}
	seen := map[string]int{}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, field, "want a name as key, got %s", kind(k))
			return nil
		}
		if line, dup := seen[k.Value]; dup {
			p.fail(k, join(field, k.Value), "given twice (first at line %d)", line)
			return nil
		}
		seen[k.Value] = k.Line
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			p.fail(k, join(field, k.Value), "unknown field (want one of %s)", strings.Join(allowed, ", "))
			return nil
		}
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

// noAliases refuses anchors and aliases anywhere (they would let a small document
// expand into a large one, and no policy needs them).
func (p *parser) noAliases(n *yaml.Node) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		p.fail(n, "", "anchors and aliases are not supported")
		return
	}
	for _, c := range n.Content {
		p.noAliases(c)
	}
}

// str returns a scalar's string value.
func (p *parser) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n, field, "want a string, got %s", kind(n))
		return ""
	}
	return n.Value
}

func (p *parser) document(root *yaml.Node) *Policy {
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		p.fail(root, "", "want one document")
		return nil
	}
	pol := &Policy{}
	var haveVersion bool
	for _, kv := range p.mapping(root.Content[0], "", "version", "rules", "redact", "secrets", "sandboxes", "agents") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "version":
			n, err := strconv.Atoi(p.str(v, "version"))
			if p.err == nil && (err != nil || n != FormatVersion) {
				p.fail(v, "version", "unknown format version %q (want %d)", v.Value, FormatVersion)
			}
			pol.Format, haveVersion = n, true
		case "rules":
			pol.Rules = p.rules(v)
		case "redact":
			pol.Redacts = p.redacts(v)
		case "secrets":
			pol.Secrets = p.secrets(v)
		case "sandboxes":
			pol.Sandboxes = p.sandboxes(v)
		case "agents":
			pol.Agents = p.agentTree(v)
		}
	}
	if p.err == nil && !haveVersion {
		p.fail(root.Content[0], "version", "missing (want version: %d)", FormatVersion)
	}
	return pol
}

func (p *parser) seq(n *yaml.Node, field string, limit int) []*yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, field, "want a list, got %s", kind(n))
		return nil
	}
	if len(n.Content) > limit {
		p.fail(n, field, "%d entries, more than %d", len(n.Content), limit)
		return nil
	}
	return n.Content
}

func (p *parser) rules(n *yaml.Node) []Rule {
	names := map[string]int{}
	var out []Rule
	for i, rn := range p.seq(n, "rules", MaxRules) {
		field := fmt.Sprintf("rules[%d]", i)
		r := Rule{Line: rn.Line}
		var within, approvers *yaml.Node
		for _, kv := range p.mapping(rn, field, "name", "match", "action", "approve_within", "approvers") {
			k, v := kv[0], kv[1]
			switch k.Value {
			case "name":
				r.Name = p.name(v, field+".name")
			case "match":
				r.Match = p.match(v, field+".match")
			case "action":
				r.Action = p.str(v, field+".action")
				if p.err == nil && !validAction(r.Action) {
					p.fail(v, field+".action", "unknown action %q (want %s, %s or %s)", r.Action, api.ActionAllow, api.ActionDeny, api.ActionApprove)
				}
			case "approve_within":
				within = v
			case "approvers":
				approvers = v
			}
		}
		if p.err != nil {
			return nil
		}
		if r.Name == "" {
			p.fail(rn, field+".name", "missing")
		} else if line, dup := names[r.Name]; dup {
			p.fail(rn, field+".name", "rule %q is already defined at line %d", r.Name, line)
		}
		names[r.Name] = rn.Line
		if r.Action == "" {
			p.fail(rn, field+".action", "missing (want %s, %s or %s)", api.ActionAllow, api.ActionDeny, api.ActionApprove)
		}
		switch {
		case within != nil && r.Action != api.ActionApprove:
			p.fail(within, field+".approve_within", "only an approve rule waits (this one is %s)", r.Action)
		case within != nil:
			s := p.str(within, field+".approve_within")
			d, err := time.ParseDuration(s)
			if p.err == nil && err != nil {
				p.fail(within, field+".approve_within", "not a duration: %q (e.g. 10m)", s)
			} else if p.err == nil && (d < MinApproveWithin || d > MaxApproveWithin) {
				p.fail(within, field+".approve_within", "%s is outside [%s, %s]", d, MinApproveWithin, MaxApproveWithin)
			}
			r.ApproveWithin = d
		case r.Action == api.ActionApprove:
			r.ApproveWithin = DefaultApproveWithin
		}
		if approvers != nil {
			r.Approvers = p.approvers(approvers, field+".approvers", r.Action)
		}
		if p.err != nil {
			return nil
		}
		out = append(out, r)
	}
	return out
}

// approvers reads an approve rule's approvers: roles, each once.
func (p *parser) approvers(n *yaml.Node, field, action string) []string {
	if action != api.ActionApprove {
		p.fail(n, field, "only an approve rule has approvers (this one is %s)", action)
		return nil
	}
	var out []string
	for i, v := range p.seq(n, field, 2) {
		f := fmt.Sprintf("%s[%d]", field, i)
		role := p.str(v, f)
		switch {
		case p.err != nil:
			return nil
		case !validRole(role):
			p.fail(v, f, "unknown role %q (want %s or %s)", role, api.RoleOperator, api.RoleAdmin)
		case role == api.RoleViewer:
			p.fail(v, f, "viewers only read and watch: they never decide (want %s or %s)", api.RoleOperator, api.RoleAdmin)
		case slices.Contains(out, role):
			p.fail(v, f, "role %q given twice", role)
		}
		out = append(out, role)
	}
	return out
}

// name checks a rule's or a pattern's name: printable, no spaces, bounded.
func (p *parser) name(n *yaml.Node, field string) string {
	s := p.str(n, field)
	if p.err != nil {
		return ""
	}
	switch {
	case s == "":
		p.fail(n, field, "empty")
	case len(s) > MaxNameBytes:
		p.fail(n, field, "%d bytes, more than %d", len(s), MaxNameBytes)
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '[' || r == ']' }) >= 0:
		p.fail(n, field, "%q has spaces, brackets or unprintable characters", s)
	}
	return s
}

func (p *parser) match(n *yaml.Node, field string) Match {
	var m Match
	for _, kv := range p.mapping(n, field, "command", "actor", "principal", "node", "role", "node_labels", "session_labels", "agent", "tool", "input") {
		k, v := kv[0], kv[1]
		f := join(field, k.Value)
		switch k.Value {
		case "command":
			m.Command = p.pattern(v, f)
			if p.err == nil {
				re, err := regexp.Compile(m.Command)
				if err != nil {
					p.fail(v, f, "bad regexp: %v", err)
				}
				m.command = re
			}
		case "input":
			m.Input = p.pattern(v, f)
			if p.err == nil {
				re, err := regexp.Compile(m.Input)
				if err != nil {
					p.fail(v, f, "bad regexp: %v", err)
				}
				m.input = re
			}
		case "agent":
			m.Agent, m.agent = p.glob(v, f)
		case "tool":
			m.Tool, m.tool = p.glob(v, f)
		case "actor":
			m.Actor, m.actor = p.glob(v, f)
		case "principal":
			m.Principal, m.principal = p.glob(v, f)
		case "node":
			m.Node, m.node = p.glob(v, f)
		case "role":
			m.Role = p.str(v, f)
			if p.err == nil && !validRole(m.Role) {
				p.fail(v, f, "unknown role %q (want %s, %s or %s)", m.Role, api.RoleViewer, api.RoleOperator, api.RoleAdmin)
			}
		case "node_labels":
			m.NodeLabels, m.nodeLabels = p.labels(v, f)
		case "session_labels":
			m.SessionLabels, m.sessionLabels = p.labels(v, f)
		}
	}
	return m
}

// pattern reads a regexp's or a glob's text and bounds it.
func (p *parser) pattern(n *yaml.Node, field string) string {
	s := p.str(n, field)
	if p.err == nil && len(s) > MaxPatternBytes {
		p.fail(n, field, "%d bytes, more than %d", len(s), MaxPatternBytes)
	}
	if p.err == nil && s == "" {
		p.fail(n, field, "empty (leave the field out to match everything)")
	}
	return s
}

func (p *parser) glob(n *yaml.Node, field string) (string, *regexp.Regexp) {
	s := p.pattern(n, field)
	if p.err != nil {
		return "", nil
	}
	re, err := compileGlob(s)
	if err != nil {
		p.fail(n, field, "bad glob: %v", err)
	}
	return s, re
}

func (p *parser) labels(n *yaml.Node, field string) (map[string]string, map[string]*regexp.Regexp) {
	kvs := p.mapping(n, field)
	if len(kvs) > api.MaxLabels {
		p.fail(n, field, "%d labels, more than %d", len(kvs), api.MaxLabels)
	}
	src, res := map[string]string{}, map[string]*regexp.Regexp{}
	for _, kv := range kvs {
		if p.err != nil {
			break
		}
		k := kv[0].Value
		if k == "" {
			p.fail(kv[0], field, "empty label key")
			break
		}
		src[k], res[k] = p.glob(kv[1], join(field, k))
	}
	return src, res
}

func (p *parser) redacts(n *yaml.Node) []Redact {
	names := map[string]int{}
	var out []Redact
	for i, rn := range p.seq(n, "redact", MaxRedacts) {
		field := fmt.Sprintf("redact[%d]", i)
		var name, pat string
		var patNode *yaml.Node
		for _, kv := range p.mapping(rn, field, "name", "pattern") {
			switch kv[0].Value {
			case "name":
				name = p.name(kv[1], field+".name")
			case "pattern":
				pat, patNode = p.pattern(kv[1], field+".pattern"), kv[1]
			}
		}
		if p.err != nil {
			return nil
		}
		switch {
		case name == "":
			p.fail(rn, field+".name", "missing")
		case names[name] != 0:
			p.fail(rn, field+".name", "pattern %q is already defined at line %d", name, names[name])
		case patNode == nil:
			p.fail(rn, field+".pattern", "missing")
		}
		if p.err != nil {
			return nil
		}
		names[name] = rn.Line
		r, err := NewRedact(name, pat)
		if err != nil {
			p.fail(patNode, field+".pattern", "%v", errors.Unwrap(err))
			return nil
		}
		out = append(out, r)
	}
	return out
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}
