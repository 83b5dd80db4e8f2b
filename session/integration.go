package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Shell integration is injected without touching any user file:
//
//   - bash runs as `bash --rcfile DIR/bashrc -i`; our rc sources the user's ~/.bashrc
//     first (bash itself reads /etc/bash.bashrc), then installs the hooks.
//   - zsh runs with ZDOTDIR=DIR; our .zshenv/.zprofile/.zshrc/.zlogin source the user's
//     files (with the user's ZDOTDIR restored while they run) and then install the hooks.
//
// The nonce is never in the shell's argv or environment (both readable through /proc by
// the shell's children): it is written to DIR/nonce (mode 0600, DIR mode 0700), read with
// a builtin and deleted before any user file runs, and kept in an unexported variable.

// integrationDir holds the per-session startup files.
type integrationDir struct {
	dir   string
	nonce string
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// writeIntegration creates the startup files for shell (bash or zsh) under parent.
func writeIntegration(parent, shell string) (*integrationDir, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "fleetmux-sh-")
	if err != nil {
		return nil, fmt.Errorf("session: integration dir: %w", err)
	}
	files := map[string]string{"nonce": nonce + "\n"}
	switch shell {
	case "bash":
		files["bashrc"] = strings.ReplaceAll(bashRC, "@DIR@", shellQuote(dir))
	case "zsh":
		files[".zshenv"] = zshEnv
		files[".zprofile"] = zshUser(".zprofile")
		files[".zshrc"] = zshUser(".zshrc") + zshHooks + "if [[ ! -o login ]]; then\n" + zshRestore + "fi\n"
		files[".zlogin"] = zshUser(".zlogin") + zshRestore
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("session: integration file: %w", err)
		}
	}
	return &integrationDir{dir: dir, nonce: nonce}, nil
}

func (d *integrationDir) remove() {
	if d != nil {
		os.RemoveAll(d.dir)
	}
}

// shellQuote quotes s for POSIX shells.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bashRC is our --rcfile. @DIR@ is replaced by the quoted integration dir.
//
// PROMPT_COMMAND gets our precmd first (so it sees the command's $?) and a postcmd last
// (to re-wrap PS1 if a theme rewrote it). PS0 sets the running flag silently through an
// arithmetic subscript and emits C. A and B are in PS1 through variable references, so
// the nonce is never part of PS1's text. D and the OSC 7 cwd go out in one write.
const bashRC = `# fleetmux shell integration for bash (generated; not a user file)
{ builtin read -r __fm_nonce < @DIR@/nonce; command rm -f -- @DIR@/nonce; } 2>/dev/null
if [ -r ~/.bashrc ]; then . ~/.bashrc; fi
if [[ $- == *a* ]]; then set +a; __fm_allexport=1; fi
__fm_A=$'\e]133;fm='"$__fm_nonce"$';A\a'
__fm_B=$'\e]133;fm='"$__fm_nonce"$';B\a'
__fm_C=$'\e]133;fm='"$__fm_nonce"$';C\a'
__fm_running=0
__fm_nil=()
__fm_precmd() {
	local __fm_ec=$?
	if [[ $__fm_running == 1 ]]; then
		__fm_running=0
		builtin printf '\e]133;fm=%s;D;%s\a\e]7;fm=%s;file://%s%s\a' "$__fm_nonce" "$__fm_ec" "$__fm_nonce" "$HOSTNAME" "$PWD"
	else
		builtin printf '\e]7;fm=%s;file://%s%s\a' "$__fm_nonce" "$HOSTNAME" "$PWD"
	fi
	return $__fm_ec
}
__fm_postcmd() {
	local __fm_ec=$?
	case $PS1 in *'${__fm_A}'*) ;; *) PS1='\[${__fm_A}\]'"$PS1"'\[${__fm_B}\]' ;; esac
	case $PS0 in *'__fm_running=1'*) ;; *) PS0="$PS0"'${__fm_nil[__fm_running=1]:-}${__fm_C}' ;; esac
	return $__fm_ec
}
if [[ ${PROMPT_COMMAND@a} == *a* ]]; then
	PROMPT_COMMAND=(__fm_precmd "${PROMPT_COMMAND[@]}" __fm_postcmd)
else
	PROMPT_COMMAND="__fm_precmd${PROMPT_COMMAND:+$'\n'$PROMPT_COMMAND}"$'\n__fm_postcmd'
fi
__fm_postcmd
if [[ -n $__fm_allexport ]]; then unset __fm_allexport; set -a; fi
`

// zshEnv reads the nonce, remembers our ZDOTDIR and the user's, and sources the user's
// .zshenv. Non-interactive shells get their ZDOTDIR back at once.
const zshEnv = `# fleetmux shell integration for zsh (generated; not a user file)
{ builtin read -r __fm_nonce < "$ZDOTDIR/nonce"; command rm -f -- "$ZDOTDIR/nonce" } 2>/dev/null
typeset -g __fm_zd=$ZDOTDIR
if (( ${+FLEETMUX_USER_ZDOTDIR} )); then
	typeset -g __fm_uzd=$FLEETMUX_USER_ZDOTDIR __fm_uzd_set=1
	unset FLEETMUX_USER_ZDOTDIR
else
	typeset -g __fm_uzd=$HOME __fm_uzd_set=0
fi
` + zshUserBody + `if [[ ! -o interactive ]]; then
` + zshRestore + `fi
`

// zshUserBody sources the user's file named by __fm_f at top level (not in a function,
// so its typesets stay global), with the user's ZDOTDIR in place while it runs.
const zshUserBody = `: ${__fm_f:=.zshenv}
if (( __fm_uzd_set )); then export ZDOTDIR=$__fm_uzd; else unset ZDOTDIR; fi
[[ -r $__fm_uzd/$__fm_f ]] && builtin source -- "$__fm_uzd/$__fm_f"
if (( ${+ZDOTDIR} )); then __fm_uzd=$ZDOTDIR __fm_uzd_set=1; fi
ZDOTDIR=$__fm_zd
unset __fm_f
`

func zshUser(name string) string {
	return "__fm_f=" + name + "\n" + zshUserBody
}

// zshRestore gives the user's ZDOTDIR back for good.
const zshRestore = `if (( __fm_uzd_set )); then export ZDOTDIR=$__fm_uzd; else unset ZDOTDIR; fi
unset __fm_zd __fm_uzd __fm_uzd_set
`

// zshHooks installs precmd/preexec hooks. Our precmd runs first so it sees $?; the
// prompt is (re)wrapped with A/B in precmd and again last, in case a theme rewrote it.
// PS1 is kept unexported since it holds the marks.
const zshHooks = `if [[ -o allexport ]]; then setopt no_allexport; __fm_allexport=1; fi
typeset -g __fm_running=0 __fm_sp=0 __fm_cr=0
# PROMPT_SP pads a line that lacks a newline before zsh runs precmd, so its padding
# would land inside the block. Turn it off and do the same right after the D mark.
[[ -o prompt_cr ]] && __fm_cr=1
[[ -o prompt_sp ]] && __fm_sp=1
setopt no_prompt_sp no_prompt_cr
__fm_wrap() {
	if [[ $PS1 != *$'\e]133;fm='$__fm_nonce* ]]; then
		PS1=$'%{\e]133;fm='$__fm_nonce$';A\a%}'$PS1$'%{\e]133;fm='$__fm_nonce$';B\a%}'
	fi
	typeset +x PS1
}
__fm_precmd() {
	local __fm_ec=$?
	if (( __fm_running )); then
		__fm_running=0
		builtin print -rn -- $'\e]133;fm='$__fm_nonce';D;'$__fm_ec$'\a'
	fi
	if (( __fm_cr && __fm_sp )); then
		local __fm_m=${PROMPT_EOL_MARK-'%B%S%#%s%b'} __fm_w=1 __fm_n
		(( ${+PROMPT_EOL_MARK} )) && __fm_w=${#${(%)__fm_m}}
		(( __fm_n = COLUMNS > __fm_w ? COLUMNS - __fm_w : 0 ))
		builtin print -rnP -- "$__fm_m"
		builtin print -rn -- "${(l:__fm_n:: :)}"$'\r \r'
	elif (( __fm_cr )); then
		builtin print -rn -- $'\r'
	fi
	builtin print -rn -- $'\e]7;fm='$__fm_nonce';file://'$HOST$PWD$'\a'
	__fm_wrap
	return $__fm_ec
}
__fm_preexec() {
	__fm_running=1
	builtin print -rn -- $'\e]133;fm='$__fm_nonce$';C\a'
}
typeset -ga precmd_functions preexec_functions
precmd_functions=(__fm_precmd ${precmd_functions:#__fm_*} __fm_wrap)
preexec_functions=(${preexec_functions:#__fm_*} __fm_preexec)
if [[ -n $__fm_allexport ]]; then unset __fm_allexport; setopt allexport; fi
`
