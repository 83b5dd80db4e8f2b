package guard

import (
	"context"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// A new session's argv and environment are decided like a run (DESIGN.md
// "Guardrails": create with argv or env is decided like run), before anything
// starts:
//
//   - argv is decided as the command line it is, its words shell-quoted and
//     joined (["/bin/sh", "-c", "rm F"] is `/bin/sh -c 'rm F'`); when it starts a
//     shell with -c, the script is decided on its own too, as a line typed at a
//     prompt would be; the strictest decision wins (deny, then approve). Denied:
//     CodeDenied naming the rule, nothing started. Approve: the create is held
//     whole (CodeHeld naming the approval); once a person approves it the node
//     creates the session as it was asked, and the approval names it.
//   - environment variables a shell or the dynamic loader executes (CodeEnv) are
//     refused while any policy is in force, whatever its rules say: a policy
//     cannot decide what PROMPT_COMMAND or BASH_ENV will run, nor what
//     LD_PRELOAD loads. Without a policy every command is allowed, these too.

// CodeEnvRule is the rule a refused environment variable is denied by.
const CodeEnvRule = "env-runs-code"

// codeEnv are environment variables whose value a shell (bash, zsh, sh, ksh) runs
// or sources, or the dynamic loader loads, at start or at every prompt.
var codeEnv = map[string]bool{
	// run or sourced by bash, zsh, sh, ksh at start or at every prompt (MAILPATH:
	// bash expands a $(…) in its messages when the mail file changes)
	"PROMPT_COMMAND": true, "PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true,
	"PROMPT": true, "PROMPT2": true, "PROMPT3": true, "PROMPT4": true, "RPROMPT": true, "RPROMPT2": true,
	"RPS1": true, "RPS2": true, "BASH_ENV": true, "ENV": true, "ZDOTDIR": true, "FPATH": true,
	"SHELLOPTS": true, "BASHOPTS": true, "IFS": true, "INPUTRC": true, "BASH_XTRACEFD": true,
	"BASH_LOADABLES_PATH": true, "MAILPATH": true,
	// where commands are found: an allowed name would run other code
	"PATH": true,
	// a command line an allowed program runs (a pager, an editor, a helper):
	// `git -p log` with GIT_PAGER set runs what it names, which no rule saw
	"PAGER": true, "GIT_PAGER": true, "MANPAGER": true, "SYSTEMD_PAGER": true, "LESSOPEN": true, "LESSCLOSE": true,
	"EDITOR": true, "VISUAL": true, "GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true, "SUDO_EDITOR": true,
	"GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_ASKPASS": true, "SSH_ASKPASS": true, "SUDO_ASKPASS": true,
	"GIT_EXTERNAL_DIFF": true, "GIT_EXEC_PATH": true, "GIT_TEMPLATE_DIR": true, "BROWSER": true,
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "NODE_PATH": true,
	"RUBYLIB": true, "PERLLIB": true, "PYTHONBREAKPOINT": true,
	// loaded by the dynamic loader or an interpreter before the program's own code
	"GCONV_PATH": true, "PERL5OPT": true, "PERL5LIB": true, "PYTHONSTARTUP": true, "PYTHONPATH": true,
	"PYTHONHOME": true, "NODE_OPTIONS": true, "RUBYOPT": true, "PYTHONUSERBASE": true, "PERL5DB": true,
	"LUA_INIT": true, "LUA_PATH": true, "LUA_CPATH": true, "TCLLIBPATH": true, "EMACSLOADPATH": true,
	"PHPRC": true, "PHP_INI_SCAN_DIR": true, "R_PROFILE": true, "R_PROFILE_USER": true, "R_ENVIRON_USER": true,
	"GEM_HOME": true, "GEM_PATH": true, "BUNDLE_GEMFILE": true, "VIMINIT": true, "EXINIT": true, "VIMRUNTIME": true,
	// where a shell or a program finds the configuration that names commands it
	// runs: the user's rc files under HOME (the session's shell sources
	// ~/.bashrc), git's core.fsmonitor and aliases, kubectl's exec plugins,
	// AWS's credential_process, npm's and cargo's configuration, make's --eval
	"HOME": true, "XDG_CONFIG_HOME": true, "GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_COMMON_DIR": true,
	"KUBECONFIG": true, "DOCKER_CONFIG": true, "AWS_CONFIG_FILE": true, "AWS_SHARED_CREDENTIALS_FILE": true,
	"CLOUDSDK_CONFIG": true, "CARGO_HOME": true, "RUSTC_WRAPPER": true, "RUSTC": true, "GOFLAGS": true, "GOENV": true,
	"MAKEFLAGS": true, "MFLAGS": true, "CC": true, "CXX": true, "CPP": true, "LD": true, "AR": true, "AS": true,
}

// CodeEnv reports whether key names an environment variable a shell or the
// dynamic loader executes (or that makes it find other code): refused in a
// create while a policy is in force.
func CodeEnv(key string) bool {
	return codeEnv[key] || strings.HasPrefix(key, "BASH_FUNC_") || strings.HasPrefix(key, "LD_") ||
		strings.HasPrefix(key, "DYLD_") || strings.HasPrefix(key, "GIT_CONFIG") || // core.pager, core.fsmonitor, aliases
		strings.HasPrefix(strings.ToUpper(key), "NPM_CONFIG_") // script-shell, node-options
}

// checkCreate decides a new session's argv and environment (see above).
func (g *Guard) checkCreate(ctx context.Context, req Request) error {
	r := req.Create
	if r == nil || len(r.Argv) == 0 && len(r.Env) == 0 {
		return nil
	}
	if err := g.Loaded(ctx); err != nil {
		return err
	}
	p := g.Policy()
	if p == nil {
		return nil
	}
	var bad []string
	for k := range r.Env {
		if CodeEnv(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		d := policy.Decision{Action: api.ActionDeny, Rule: CodeEnvRule, Version: p.Version}
		req.Decision.set(d)
		return &api.Error{Code: api.CodeDenied, Rule: CodeEnvRule,
			Message: "denied: the environment of a new session may not set " + strings.Join(bad, ", ") +
				" while a policy is in force on node " + g.cfg.Node + " (a shell or the loader runs what they name, which no rule decides): nothing was started"}
	}
	if len(r.Argv) == 0 {
		return nil
	}
	command := ArgvCommand(r.Argv)
	d := g.decide(nil, req.Writer, command, req.Held)
	if script, ok := shellScript(r.Argv); ok {
		if ds := g.decide(nil, req.Writer, script, req.Held); stricter(ds, d) {
			d = ds
		}
	}
	err := g.verdict(ctx, nil, req.Writer, command, d, req.Held)
	req.Decision.set(d)
	if err != nil {
		if ae, ok := err.(*api.Error); ok && ae.Code == api.CodeDenied {
			ae.Message = strings.Replace(ae.Message, "nothing was typed", "no session was started", 1)
		}
	}
	return err
}

// stricter reports whether a is stricter than b: deny over approve over allow.
func stricter(a, b policy.Decision) bool {
	rank := func(d policy.Decision) int {
		switch d.Action {
		case api.ActionAllow:
			return 0
		case api.ActionApprove:
			return 1
		}
		return 2 // deny, or anything unknown
	}
	return rank(a) > rank(b)
}

// shells are the programs whose -c argument is a command line.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"ash": true, "busybox": true, "fish": true, "csh": true, "tcsh": true, "rbash": true, "yash": true, "posh": true}

// shellScript is the script of an argv that starts a shell with -c (the first
// argument after an option word holding c), if it does.
func shellScript(argv []string) (string, bool) {
	prog := filepath.Base(argv[0])
	args := argv[1:]
	if prog == "env" || prog == "exec" || prog == "nohup" || prog == "setsid" || prog == "busybox" {
		for len(args) > 0 && (strings.HasPrefix(args[0], "-") || strings.Contains(args[0], "=")) {
			args = args[1:]
		}
		if len(args) == 0 {
			return "", false
		}
		return shellScript(args)
	}
	if !shells[strings.TrimPrefix(prog, "-")] {
		return "", false
	}
	// the script is the first operand once the options end, wherever -c is
	// among them (`sh -c -- S`, `bash -c -o posix S`, `bash -x -c S`)
	c := false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' && a[0] != '+' {
			break
		}
		switch {
		case a == "--rcfile" || a == "--init-file":
			i++
		case strings.HasPrefix(a, "--"):
		default:
			if a[0] == '-' && strings.ContainsRune(a, 'c') {
				c = true
			}
			if strings.ContainsAny(a, "oO") {
				i++
			}
		}
	}
	if !c || i >= len(args) {
		return "", false
	}
	return args[i], true
}

// plainWord is a word the shell reads as it is, unquoted.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ArgvCommand is argv as the command line a shell would read it as: each word
// shell-quoted (single quotes where needed), joined by spaces.
func ArgvCommand(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if plainWord.MatchString(a) {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}
