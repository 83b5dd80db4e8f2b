package guard

import "testing"

func TestArgvCommand(t *testing.T) {
	for argv, want := range map[*[]string]string{
		{"/bin/rm", "F"}:                       "/bin/rm F",
		{"/bin/sh", "-c", "rm F; systemctl x"}: `/bin/sh -c 'rm F; systemctl x'`,
		{"echo", "it's"}:                       `echo 'it'\''s'`,
		{"printf", ""}:                         "printf ''",
	} {
		if got := ArgvCommand(*argv); got != want {
			t.Errorf("ArgvCommand(%q) = %q, want %q", *argv, got, want)
		}
	}
}

func TestShellScript(t *testing.T) {
	for _, c := range []struct {
		argv   []string
		script string
		ok     bool
	}{
		{[]string{"/bin/sh", "-c", "rm F"}, "rm F", true},
		{[]string{"bash", "-xc", "rm F"}, "rm F", true},
		{[]string{"/usr/bin/env", "A=1", "zsh", "-c", "rm F"}, "rm F", true},
		{[]string{"bash", "script.sh"}, "", false},
		{[]string{"python3", "-c", "x"}, "", false},
		{[]string{"sh", "-c"}, "", false},
		{[]string{"bash", "-c", "--", "rm F"}, "rm F", true},
		{[]string{"bash", "-c", "-x", "rm F"}, "rm F", true},
		{[]string{"bash", "-c", "-o", "posix", "rm F"}, "rm F", true},
		{[]string{"bash", "--norc", "-e", "-c", "rm F", "arg0"}, "rm F", true},
		{[]string{"bash", "--", "-c"}, "", false},
	} {
		s, ok := shellScript(c.argv)
		if s != c.script || ok != c.ok {
			t.Errorf("shellScript(%q) = %q, %v; want %q, %v", c.argv, s, ok, c.script, c.ok)
		}
	}
}

func TestCodeEnv(t *testing.T) {
	for k, want := range map[string]bool{
		"PROMPT_COMMAND": true, "PS1": true, "BASH_ENV": true, "ENV": true, "ZDOTDIR": true, "LD_PRELOAD": true,
		"BASH_FUNC_ls%%": true, "IFS": true, "MAILPATH": true, "PATH": true, "MINE": false, "LANG": false, "TZ": false,
		"HOME": true, "XDG_CONFIG_HOME": true, "KUBECONFIG": true, "GIT_DIR": true, "npm_config_script_shell": true,
		"NPM_CONFIG_NODE_OPTIONS": true, "GOFLAGS": true, "MAKEFLAGS": true, "AWS_CONFIG_FILE": true,
		"TERM": false, "LC_ALL": false, "NO_COLOR": false, "HOMEPAGE": false, "ANTHROPIC_BASE_URL": false,
	} {
		if CodeEnv(k) != want {
			t.Errorf("CodeEnv(%q) = %v, want %v", k, !want, want)
		}
	}
}
