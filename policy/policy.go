// Package policy is the guardrail engine of DESIGN.md "Guardrails": it parses a policy
// document, decides allow, deny or approve for a request, and redacts secrets from an
// output stream. It is pure logic: no I/O, no clock, no goroutines.
//
// A policy is YAML (or JSON, which YAML accepts):
//
//	version: 1
//	rules:
//	  - name: no-disk-wipes
//	    match: {command: '(^|[;&|]\s*)(rm\s+-[a-z]*r[a-z]*f?\s+/(\s|$)|mkfs|dd\s.*of=/dev/)'}
//	    action: deny
//	  - name: prod-needs-a-human
//	    match: {node_labels: {env: prod}, actor: 'mcp:*'}
//	    action: approve
//	    approve_within: 10m
//	  - name: ci-stays-out-of-prod
//	    match: {principal: 'token:ci*', node_labels: {env: prod}}
//	    action: deny
//	redact:
//	  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}
//
// An agent's request to use a tool (Claude Code's PermissionRequest: Bash, Edit,
// WebFetch, …) is decided by the same rules: `agent` (the driver, a glob), `tool`
// (a glob) and `input` (RE2 on the tool's input: for Bash its command, which is also
// the request's `command`, so command rules hold for an agent's Bash too):
//
//   - name: agents-ask-before-shell
//     match: {agent: claude, tool: Bash}
//     action: approve
//
// Identities: `principal` matches who the controller authenticated ("token:NAME",
// "ssh:FINGERPRINT"), which the controller signs into every request; `actor`
// matches the label a client gives itself, which any client may set to anything.
// A rule that grants or denies by who asks must match `principal`: an `actor`
// rule only sorts clients that name themselves honestly (an agent that renames
// itself dodges it).
//
// Two versions must not be confused: the document's `version:` is the format version
// (Policy.Format, only 1 exists), while Policy.Version is the stored revision, set by
// whoever stores the policy (the FLEETMUX_POLICY bucket's revision) and copied into
// every Decision so audit records can name it.
//
// Deciding: rules are tried in order and the first whose match fits decides. When no
// rule matches, the request is allowed, and a nil *Policy allows everything: a fleet
// without a policy behaves as before guardrails existed. See Decide for how a command
// is matched and what is best effort.
//
// Redacting: a Redactor replaces matches of the redact patterns in a stream with
// "[REDACTED:name]", also when a secret is split across writes, holding back at most
// the longest match a pattern can have (MaxMatchBytes), and only while a secret may
// still start in the tail (output that ends where none can, a prompt, goes at once).
// Redaction changes lengths, so
// the node redacts before output offsets are assigned: the stream, `read` and the
// recording all see the same redacted bytes and the same offsets; the unredacted bytes
// never get an offset.
package policy

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Limits of a policy document, checked by Parse.
const (
	// MaxBytes bounds a policy document.
	MaxBytes = 256 << 10
	// MaxRules bounds the rules of a policy, MaxRedacts its redact patterns.
	MaxRules   = 1000
	MaxRedacts = 64
	// MaxNameBytes bounds a rule's or a redact pattern's name.
	MaxNameBytes = 64
	// MaxPatternBytes bounds a regexp or a glob (command, actor, node, label values,
	// redact patterns).
	MaxPatternBytes = 1024
	// DefaultApproveWithin is an approve rule's approve_within when none is given;
	// approve_within must lie in [MinApproveWithin, MaxApproveWithin].
	DefaultApproveWithin = 10 * time.Minute
	MinApproveWithin     = time.Second
	MaxApproveWithin     = 24 * time.Hour
)

// FormatVersion is the only `version:` a policy document may have.
const FormatVersion = 1

// ErrInvalid is wrapped by every error Parse returns for a document it refuses.
var ErrInvalid = errors.New("invalid policy")

// Policy is a parsed, validated policy. It is immutable after Parse (Version aside,
// which its owner sets before sharing it) and safe for concurrent use.
type Policy struct {
	// Format is the document's `version:` (FormatVersion).
	Format int
	// Version is the stored revision of this policy, set by whoever stores or loads it;
	// Parse leaves it 0. Every Decision carries it.
	Version uint64
	// Rules are tried in order.
	Rules []Rule
	// Redacts are the redact patterns, in document order.
	Redacts []Redact
	// Secrets say who may have a node type which stored secret, where and at
	// which prompt (secret.go).
	Secrets []Secret
	// Sandboxes are the sandbox profiles and the rules that choose one for a
	// new session (sandbox.go); nil without a sandboxes section.
	Sandboxes *Sandboxes
	// Agents are the limits on trees of agents (agenttree.go); zero: defaults.
	Agents AgentTree
}

// Rule is one rule of a policy.
type Rule struct {
	Name   string
	Match  Match
	Action string // api.ActionAllow, api.ActionDeny or api.ActionApprove
	// ApproveWithin is how long an approve rule's request may wait for a person;
	// undecided by then means denied. Zero unless Action is api.ActionApprove.
	ApproveWithin time.Duration
	// Approvers are the roles beside admin whose people may decide an approve rule's
	// requests (`approvers: [operator]`; viewers never decide); admin always may.
	// Nil unless Action is api.ActionApprove.
	Approvers []string
	Line      int // the rule's line in the document, for messages
}

// Match is what a request must have for its rule to apply; every field given must
// fit, and an empty Match fits every request.
type Match struct {
	Command       string            // RE2; see Decide
	Actor         string            // glob on the actor: a label the client chose (see Request)
	Principal     string            // glob on the authenticated principal: the identity
	Node          string            // glob on the node's name
	Role          string            // exactly this role
	NodeLabels    map[string]string // every key present, its value fitting the glob
	SessionLabels map[string]string // likewise for the session's labels
	// Agent, Tool and Input match an agent's request to use one of its tools
	// (Request.Tool set): the driver and the tool's name (globs), and its input
	// (RE2, matched like Command). A rule with any of them fits no other request.
	Agent, Tool, Input string

	command, input            *regexp.Regexp
	actor, principal, node    *regexp.Regexp
	agent, tool               *regexp.Regexp
	nodeLabels, sessionLabels map[string]*regexp.Regexp
}

// Error is one problem Parse found, with where it is.
type Error struct {
	Line  int    // 1-based; 0 when unknown
	Field string // e.g. "rules[2].match.command"; "" for the document
	Msg   string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Field != "":
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	case e.Field != "":
		return fmt.Sprintf("%s: %s", e.Field, e.Msg)
	}
	return e.Msg
}

// Unwrap makes every *Error match ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// validRole reports whether r is one of api's roles.
func validRole(r string) bool {
	return r == api.RoleViewer || r == api.RoleOperator || r == api.RoleAdmin
}

// validAction reports whether a is one of api's policy actions.
func validAction(a string) bool {
	return a == api.ActionAllow || a == api.ActionDeny || a == api.ActionApprove
}
