package policy

import (
	"errors"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Request is what a decision is about.
type Request struct {
	Command string // the command line as it will be typed (may span lines)
	// Principal is who asks, as the controller authenticated it and signed it
	// (trust.Principal.Principal: "token:ci", "ssh:SHA256:…"). Rules that single
	// out callers must match this (Match.Principal).
	Principal string
	// Actor is the label the caller gave itself ("mcp:claude", "cli:bob@host"),
	// carried in the verified request but chosen freely by any client: a rule on
	// it can be dodged by renaming, so use it to sort cooperative clients (e.g.
	// send agents to a person), never to grant or deny by identity.
	Actor         string
	Role          string // the principal's role (api.RoleViewer, …)
	Node          string // the node's name
	NodeLabels    map[string]string
	SessionLabels map[string]string
	// Agent, Tool and Input are set for an agent's request to use a tool: the
	// agent's driver ("claude"), the tool ("Bash", "Edit", "WebFetch", …) and its
	// input as text (for Bash the command, which Command then carries too; for a
	// tool on a file its path; for a fetch its URL).
	Agent, Tool, Input string
}

// Decision is the outcome of Decide.
type Decision struct {
	Action string // api.ActionAllow, api.ActionDeny or api.ActionApprove
	// Rule is the name of the rule that decided; "" when no rule matched.
	Rule string
	// ApproveWithin is how long an approve decision may wait for a person.
	ApproveWithin time.Duration
	// Version is the policy's Version (0 for a nil policy).
	Version uint64
}

// Decide returns the action of the first rule whose match fits req. No rule matching
// means allow, and a nil *Policy allows everything.
//
// A command pattern is tried on several views of the command, so that trivial
// rewrites do not dodge it: the whole text, each line, and each simple command
// found by a small shell lexer (split at ; & | ( ) { } ` $( and newlines, with
// quotes and backslashes removed, comments dropped and blanks squeezed), each also
// without a leading path on its program (/bin/rm → rm) and without leading
// assignments and wrappers with their options (FOO=1 /usr/bin/sudo -u root env nice
// -n 5 timeout 9 nohup setsid stdbuf ionice command exec time builtin), and the
// simple commands of a shell's -c script (`bash -c -- 'rm x'`).
// A deny or approve rule fits when its pattern matches any view. An allow rule is
// stricter: it fits only when its pattern matches every simple command, so
// `ls; rm -rf /` is not allowed by an allow rule for `^ls`.
//
// This is best effort, and a policy must not be mistaken for a sandbox: a shell can
// build a command at run time (variables, eval, $'\x72m', base64, aliases, scripts
// written then run) that no pattern over the text can see.
func (p *Policy) Decide(req Request) Decision {
	if p == nil {
		return Decision{Action: api.ActionAllow}
	}
	var v *views
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.Match.fits(req, r.Action, &v) {
			continue
		}
		return Decision{Action: r.Action, Rule: r.Name, ApproveWithin: r.ApproveWithin, Version: p.Version}
	}
	return Decision{Action: api.ActionAllow, Version: p.Version}
}

// Approvers are the roles beside admin that may decide the requests held by the
// named rule (its Approvers); nil for a nil policy or an unknown rule.
func (p *Policy) Approvers(rule string) []string {
	if p == nil {
		return nil
	}
	for i := range p.Rules {
		if p.Rules[i].Name == rule {
			return p.Rules[i].Approvers
		}
	}
	return nil
}

// fits reports whether req has everything m asks for. v caches the command's views
// across rules (and the tool input's, which are only made for a rule on input).
func (m *Match) fits(req Request, action string, v **views) bool {
	if m.agent != nil || m.tool != nil || m.input != nil {
		if req.Tool == "" {
			return false // rules on agents' tools decide nothing else
		}
		if m.agent != nil && !m.agent.MatchString(req.Agent) || m.tool != nil && !m.tool.MatchString(req.Tool) {
			return false
		}
		if m.input != nil {
			iv := viewsOf(req.Input)
			if action == api.ActionAllow && !iv.all(m.input) || action != api.ActionAllow && !iv.any(m.input) {
				return false
			}
		}
	}
	if m.Role != "" && req.Role != m.Role {
		return false
	}
	if m.actor != nil && !m.actor.MatchString(req.Actor) {
		return false
	}
	if m.principal != nil && !m.principal.MatchString(req.Principal) {
		return false
	}
	if m.node != nil && !m.node.MatchString(req.Node) {
		return false
	}
	if !labelsFit(m.nodeLabels, req.NodeLabels) || !labelsFit(m.sessionLabels, req.SessionLabels) {
		return false
	}
	if m.command == nil {
		return true
	}
	if *v == nil {
		*v = viewsOf(req.Command)
	}
	if action == api.ActionAllow {
		return (*v).all(m.command)
	}
	return (*v).any(m.command)
}

func labelsFit(want map[string]*regexp.Regexp, have map[string]string) bool {
	for k, g := range want {
		val, ok := have[k]
		if !ok || !g.MatchString(val) {
			return false
		}
	}
	return true
}

// views are the texts a command pattern is tried on (see Decide).
type views struct {
	raw    []string // the whole command and its lines
	simple []string // simple commands, normalised
	extra  []string // simple commands without path or wrappers, when different
}

func (v *views) any(re *regexp.Regexp) bool {
	for _, set := range [][]string{v.raw, v.simple, v.extra} {
		for _, s := range set {
			if re.MatchString(s) {
				return true
			}
		}
	}
	return false
}

// all: every simple command matches (the whole text when there is none).
func (v *views) all(re *regexp.Regexp) bool {
	if len(v.simple) == 0 {
		return re.MatchString(v.raw[0])
	}
	for _, s := range v.simple {
		if !re.MatchString(s) {
			return false
		}
	}
	return true
}

func viewsOf(cmd string) *views {
	v := &views{raw: []string{cmd}}
	if strings.ContainsAny(cmd, "\r\n") {
		v.raw = append(v.raw, strings.FieldsFunc(cmd, func(r rune) bool { return r == '\n' || r == '\r' })...)
	}
	v.simple = simpleCommands(cmd)
	v.addExtra(v.simple, 0)
	return v
}

// addExtra adds the unwrapped forms of simple commands, and the simple commands of
// a shell's -c script (`bash -c 'rm x'`, `sudo sh -c -- 'rm x'`) with theirs, to
// the views deny and approve rules are tried on, down to a small nesting depth.
func (v *views) addExtra(simple []string, depth int) {
	for _, s := range simple {
		e := unwrap(s)
		if e != s {
			v.extra = append(v.extra, e)
		}
		if script, ok := shellScript(e); ok && depth < 4 {
			inner := simpleCommands(script)
			v.extra = append(v.extra, inner...)
			v.addExtra(inner, depth+1)
		}
	}
}

// shells are the programs whose -c option makes their first operand a script.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"ash": true, "fish": true, "csh": true, "tcsh": true, "rbash": true, "yash": true, "posh": true}

// shellScript is the script of an unwrapped simple command that runs a shell with
// -c: the words from its first operand on, after every option (a -c anywhere
// among them, -o/-O and --rcfile/--init-file taking a word, -- ending them).
func shellScript(s string) (string, bool) {
	words := strings.Split(s, " ")
	if !shells[strings.TrimPrefix(words[0], "-")] {
		return "", false
	}
	c := false
	i := 1
	for ; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			i++
			break
		}
		if len(w) < 2 || w[0] != '-' && w[0] != '+' {
			break
		}
		switch {
		case w == "--rcfile" || w == "--init-file":
			i++
		case strings.HasPrefix(w, "--"):
		default:
			if w[0] == '-' && strings.ContainsRune(w, 'c') {
				c = true
			}
			if strings.ContainsAny(w, "oO") {
				i++
			}
		}
	}
	if !c || i >= len(words) {
		return "", false
	}
	return strings.Join(words[i:], " "), true
}

// simpleCommands splits a command line into simple commands the way a shell would,
// roughly: it never fails, and in doubt it splits more.
func simpleCommands(cmd string) []string {
	var out []string
	var cur strings.Builder
	word := true // at the start of a word
	end := func() {
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			out = append(out, s)
		}
		cur.Reset()
		word = true
	}
	const (
		plain = iota
		single
		double
	)
	state := plain
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch state {
		case single:
			if c == '\'' {
				state = plain
			} else {
				cur.WriteByte(c)
			}
			continue
		case double:
			switch {
			case c == '"':
				state = plain
			case c == '\\' && i+1 < len(cmd) && strings.IndexByte("$`\"\\\n", cmd[i+1]) >= 0:
				i++
				cur.WriteByte(cmd[i])
			case c == '`', c == '$' && i+1 < len(cmd) && cmd[i+1] == '(':
				// a command substitution runs even inside double quotes
				end()
				state = plain
				if c == '$' {
					i++
				}
			default:
				cur.WriteByte(c)
			}
			continue
		}
		switch {
		case c == '\\':
			if i+1 < len(cmd) {
				i++
				if cmd[i] != '\n' {
					cur.WriteByte(cmd[i])
				}
			}
			word = false
		case c == '\'':
			state, word = single, false
		case c == '"':
			state, word = double, false
		case c == '#' && word:
			for i+1 < len(cmd) && cmd[i+1] != '\n' {
				i++
			}
		case strings.IndexByte(";&|(){}`\n\r", c) >= 0:
			end()
		case c == '$' && i+1 < len(cmd) && cmd[i+1] == '(':
			end()
			i++
		case c == ' ' || c == '\t':
			cur.WriteByte(' ')
			word = true
		default:
			cur.WriteByte(c)
			word = false
		}
	}
	end()
	return out
}

// wrappers are programs that run their arguments as a command, each with its
// options that take the next word as their value.
var wrappers = map[string]map[string]bool{
	"sudo": {"-u": true, "-g": true, "-C": true, "-D": true, "-h": true, "-p": true, "-r": true, "-t": true,
		"-U": true, "-T": true},
	"doas": {"-u": true, "-C": true}, "env": {"-u": true, "-C": true}, "nice": {"-n": true},
	"timeout": {"-s": true, "-k": true}, "ionice": {"-c": true, "-n": true, "-p": true},
	"nohup": nil, "setsid": nil, "stdbuf": nil, "command": nil, "exec": {"-a": true}, "time": nil,
	"builtin": nil, "then": nil, "do": nil, "else": nil, "!": nil,
}

// unwrap drops leading assignments and wrappers (by their base name, with their
// options, and timeout's duration) from a simple command, and the path of its
// program.
func unwrap(s string) string {
	words := strings.Split(s, " ")
	for len(words) > 1 {
		if isAssignment(words[0]) {
			words = words[1:]
			continue
		}
		w := path.Base(words[0])
		opts, ok := wrappers[w]
		if !ok {
			break
		}
		words = words[1:]
		for len(words) > 1 && len(words[0]) > 1 && words[0][0] == '-' {
			if words[0] == "--" {
				words = words[1:]
				break
			}
			if opts[words[0]] && len(words) > 2 {
				words = words[1:]
			}
			words = words[1:]
		}
		if w == "timeout" && len(words) > 1 {
			words = words[1:] // the duration
		}
	}
	if strings.Contains(words[0], "/") {
		words[0] = path.Base(words[0])
	}
	return strings.Join(words, " ")
}

func isAssignment(w string) bool {
	i := strings.IndexByte(w, '=')
	if i <= 0 {
		return false
	}
	for _, r := range w[:i] {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// compileGlob turns a glob into an anchored regexp: * matches any run of characters
// (slashes included), ? one character, \ quotes the next one; everything else is
// itself. There are no character classes.
func compileGlob(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(g) {
				return nil, errors.New(`it ends with a lone \`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[', ']':
			return nil, errors.New("character classes are not supported (quote [ with \\)")
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}
