package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Shell integration is injected without touching any user file:
//
//   - bash runs as `bash --rcfile DIR/bashrc -i`; our rc sources the user's ~/.bashrc
//     first (bash itself reads /etc/bash.bashrc), then installs the hooks.
//   - zsh runs with ZDOTDIR=DIR; our .zshenv/.zprofile/.zshrc/.zlogin source the user's
//     files (with the user's ZDOTDIR restored while they run) and then install the hooks.
//
// The nonce is never in a file, nor in the shell's argv or environment (all readable by
// other processes of the same user): the shell inherits one end of a socket pair as fd
// nonceFD, from which our rc reads the nonce with a builtin and which it closes before
// any user file runs, so no command the user runs inherits it; the nonce stays in an
// unexported shell variable. A socket, not a pipe: a pipe could be opened by another
// process of the user through /proc/PID/fd/3 while the shell starts, a socket cannot
// (ENXIO). Code that runs as the same user can still read the shell's memory where the
// kernel lets it ptrace (Yama ptrace_scope 0): sessions for untrusted code run as
// another user (README).

// nonceFD is the shell's fd that carries the nonce (exec.Cmd.ExtraFiles[0]).
const nonceFD = 3

// integrationDir holds the per-session startup files, and the nonce the shell reads
// from fd nonceFD.
type integrationDir struct {
	dir   string
	nonce string
}

// nonceSocket returns the shell's end of a socket pair that holds nonce and then
// EOF: our end is written and closed here. The caller passes it as the child's fd
// nonceFD and closes it once the child started.
func nonceSocket(nonce string) (*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("session: nonce socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "nonce")
	theirs := os.NewFile(uintptr(fds[1]), "nonce")
	_, err = ours.Write([]byte(nonce + "\n")) // 33 bytes: far below the socket's buffer
	if cerr := ours.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("session: nonce socket: %w", err)
	}
	return theirs, nil
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// writeIntegration creates the startup files for shell (bash or zsh) under parent;
// guarded adds the guard's hooks (guard.go, guardhooks.go).
func writeIntegration(parent, shell string, guarded bool) (*integrationDir, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "fleetmux-sh-")
	if err != nil {
		return nil, fmt.Errorf("session: integration dir: %w", err)
	}
	files := map[string]string{}
	switch shell {
	case "bash":
		files["bashrc"] = bashRC
		if guarded {
			files["bashrc"] = bashRC + bashGuard
		}
	case "zsh":
		files[".zshenv"] = zshEnv
		files[".zprofile"] = zshUser(".zprofile")
		hooks := zshHooks
		if guarded {
			hooks += zshGuard
		}
		files[".zshrc"] = zshUser(".zshrc") + hooks + "if [[ ! -o login ]]; then\n" + zshRestore + "fi\n"
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

// BashRC writes, under parent, the startup files a bash session runs with and
// returns the rc file (run `bash --rcfile RCFILE -i`), the nonce its marks carry
// (OSC 133 "fm=NONCE;A" and so on), and the file the shell reads the nonce from,
// which must be its fd 3 (exec.Cmd.ExtraFiles[0]; close it once the shell started).
// It is for benchmarks that measure fleetmux's shell hooks without a Session; the
// caller removes the files with parent.
func BashRC(parent string) (rcfile, nonce string, nonceFile *os.File, err error) {
	d, err := writeIntegration(parent, "bash", false)
	if err != nil {
		return "", "", nil, err
	}
	f, err := nonceSocket(d.nonce)
	if err != nil {
		d.remove()
		return "", "", nil, err
	}
	return filepath.Join(d.dir, "bashrc"), d.nonce, f, nil
}

func (d *integrationDir) remove() {
	if d != nil {
		os.RemoveAll(d.dir)
	}
}

// bashRC is our --rcfile.
//
// The hooks, and how each survives users and themes that replace them:
//
//   - __fm_precmd, first in PROMPT_COMMAND[0], sends D (a command ran: PS0 set
//     __fm_running) or N (none did: an empty, rejected or interrupted line) with $?,
//     then the cwd (OSC 7), before any other prompt hook can print into the block. It
//     only trusts $? when it is first in PROMPT_COMMAND[0] (else another command ran
//     before it in the same element).
//   - __fm_guard, last in the PROMPT_COMMAND array (bash 5.1+ runs every element with
//     the command's $? restored), does what precmd did when precmd did not run (a
//     scalar `PROMPT_COMMAND=...` replaces element 0 only), puts precmd back, moves
//     itself last again, and re-wraps PS1 (A and B through variable references, so
//     the nonce is never in PS1's text) and PS0 (C, and __fm_running set silently
//     through an arithmetic subscript).
//   - PS1 and PS0 themselves put the guard back (a `:=` expansion inside an arithmetic subscript
//     prints nothing) when the whole array was replaced or unset, and sends R;<seq>
//     when no hook of ours ran since the last prompt: bash re-prompts without running
//     PROMPT_COMMAND after a failed history expansion (`echo hi!x`), and a prompt whose
//     hooks are gone comes back the same way. The sequence number tells a new prompt
//     from a redraw of the same one (readline repeats the expanded prompt's bytes).
//
// The nonce stays in unexported variables; nothing of it is in argv or environ.
const bashRC = `# fleetmux shell integration for bash (generated; not a user file)
builtin read -r __fm_nonce <&3 2>/dev/null
exec 3<&-
if [ -r ~/.bashrc ]; then . ~/.bashrc; fi
if [[ $- == *a* ]]; then set +a; __fm_allexport=1; fi
__fm_A=$'\e]133;fm='"$__fm_nonce"$';A\a'
__fm_B=$'\e]133;fm='"$__fm_nonce"$';B\a'
__fm_C=$'\e]133;fm='"$__fm_nonce"$';C\a'
__fm_running=0
__fm_pc=1 __fm_seq=0 __fm_bel=$'\a'
__fm_R=($'\e]133;fm='"$__fm_nonce"$';R;' '')
__fm_nil=()
__fm_arrays=0
(( BASH_VERSINFO[0] > 5 || BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1 )) && __fm_arrays=1
__fm_end() {
	local __fm_k=N
	# A line the guard denied (guarded sessions only) ran nothing: N.
	if [[ $__fm_running == 1 ]] && [[ -z $__fm_gdeny || ${__fm_gdeny%%:*} != "${__fm_hash@P}" ]]; then __fm_k=D; fi
	__fm_running=0 __fm_pc=1
	builtin printf '\e]133;fm=%s;%s;%s\a\e]7;fm=%s;file://%s%s\a' "$__fm_nonce" "$__fm_k" "$1" "$__fm_nonce" "$HOSTNAME" "$PWD"
}
__fm_precmd() {
	local __fm_ec=$?
	if [[ ${PROMPT_COMMAND[0]} == __fm_precmd* ]]; then __fm_end "$__fm_ec"; fi
	return $__fm_ec
}
__fm_guard() {
	local __fm_ec=$?
	# Once per prompt: PS1 re-adds the guard when the array was replaced, so it may
	# stand in PROMPT_COMMAND twice.
	[[ $__fm_gseq == "$__fm_seq" ]] && return $__fm_ec
	__fm_gseq=$__fm_seq
	# precmd ran, first in element 0, unless that element was replaced.
	[[ ${PROMPT_COMMAND[0]} == __fm_precmd* ]] || __fm_end "$__fm_ec"
	__fm_arm
	if [[ -n $__fm_gfd ]]; then
		builtin shopt -q extdebug || builtin shopt -s extdebug
		__fm_garm
	fi
	return $__fm_ec
}
__fm_arm() {
	if [[ $__fm_arrays == 1 ]]; then
		# Nothing replaced (every prompt but a few): leave at once.
		[[ ${PROMPT_COMMAND[0]-} == __fm_precmd* && ${PROMPT_COMMAND[-1]} == __fm_guard &&
			$PS1 == *'${__fm_A}'* && $PS0 == *'__fm_running=1'* ]] && return
		local __fm_i __fm_last=-1
		if [[ ${PROMPT_COMMAND[0]-} != __fm_precmd* ]]; then
			__fm_i=${PROMPT_COMMAND[0]-}
			__fm_i=${__fm_i//__fm_precmd/:}
			PROMPT_COMMAND[0]=__fm_precmd${__fm_i:+$'\n'$__fm_i}
		fi
		for __fm_i in "${!PROMPT_COMMAND[@]}"; do __fm_last=$__fm_i; done
		if [[ ${PROMPT_COMMAND[__fm_last]} != __fm_guard ]]; then
			for __fm_i in "${!PROMPT_COMMAND[@]}"; do
				[[ ${PROMPT_COMMAND[__fm_i]} == __fm_guard ]] && unset "PROMPT_COMMAND[$__fm_i]"
			done
			# Last, at the index PS1 re-arms, so that it does not add a second one.
			if ((__fm_last < 2147483647)); then PROMPT_COMMAND[2147483647]=__fm_guard; else PROMPT_COMMAND+=(__fm_guard); fi
		fi
	else
		case $PROMPT_COMMAND in __fm_precmd*) ;; *) PROMPT_COMMAND="__fm_precmd${PROMPT_COMMAND:+$'\n'$PROMPT_COMMAND}" ;; esac
		case $PROMPT_COMMAND in *__fm_guard) ;; *) PROMPT_COMMAND+=$'\n__fm_guard' ;; esac
	fi
	case $PS1 in *'${__fm_A}'*) ;; *) PS1='\[${__fm_nil[${PROMPT_COMMAND[2147483647]:=__fm_guard}]}${__fm_nil[__fm_seq+=1]}${__fm_R[__fm_pc]}${__fm_R[__fm_pc]:+$__fm_seq$__fm_bel}${__fm_nil[__fm_pc=0]}${__fm_A}\]'"$PS1"'\[${__fm_B}\]' ;; esac
	case $PS0 in *'__fm_running=1'*) ;; *) PS0="$PS0"'${__fm_nil[${PROMPT_COMMAND[2147483647]:=__fm_guard}]}${__fm_nil[__fm_running=1]:-}${__fm_C}' ;; esac
}
__fm_arm
if [[ -n $__fm_allexport ]]; then unset __fm_allexport; set -a; fi
`

// zshEnv reads the nonce, remembers our ZDOTDIR and the user's, and sources the user's
// .zshenv. Non-interactive shells get their ZDOTDIR back at once.
const zshEnv = `# fleetmux shell integration for zsh (generated; not a user file)
builtin read -r __fm_nonce <&3 2>/dev/null
exec 3<&-
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

// zshHooks installs the hooks. __fm_precmd sends D (a command ran: preexec set
// __fm_running) or N (none did: an empty, rejected or interrupted line) with $?, then
// the cwd, once per prompt. It is both in the precmd function (which zsh calls before
// the precmd_functions, so $? is the command's) and first in precmd_functions (where it
// acts only when the function is not ours), so clearing either leaves the other; each prompt it puts itself, __fm_wrap (last, to
// re-wrap a prompt a theme rewrote) and the preexec hook back. preexec is both the
// function and in preexec_functions too. A user's own precmd/preexec functions
// defined before us keep running, called from ours. PS1 is kept unexported since it
// holds the marks.
const zshHooks = `if [[ -o allexport ]]; then setopt no_allexport; __fm_allexport=1; fi
typeset -g __fm_running=0 __fm_sp=0 __fm_cr=0
# PROMPT_SP pads a line that lacks a newline before zsh runs precmd, so its padding
# would land inside the block. Turn it off and do the same right after the D mark.
[[ -o prompt_cr ]] && __fm_cr=1
[[ -o prompt_sp ]] && __fm_sp=1
setopt no_prompt_sp no_prompt_cr
(( ${+functions[precmd]} )) && functions[__fm_user_precmd]=$functions[precmd]
(( ${+functions[preexec]} )) && functions[__fm_user_preexec]=$functions[preexec]
__fm_wrap() {
	if [[ $PS1 != *$'\e]133;fm='$__fm_nonce* ]]; then
		PS1=$'%{\e]133;fm='$__fm_nonce$';A\a%}'$PS1$'%{\e]133;fm='$__fm_nonce$';B\a%}'
	fi
	typeset +x PS1
	(( ${+__fm_gfd} )) && __fm_garm
	return 0
}
__fm_precmd() {
	local __fm_ec=$?
	# From precmd_functions (no argument): only when the precmd function is not ours.
	[[ -z $1 && $functions[precmd] == *'__fm_precmd 1'* ]] && return $__fm_ec
	local __fm_k=N
	(( __fm_running )) && __fm_k=D
	__fm_running=0
	builtin print -rn -- $'\e]133;fm='$__fm_nonce';'$__fm_k';'$__fm_ec$'\a'
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
	typeset -ga precmd_functions preexec_functions
	if [[ ${precmd_functions[1]-} != __fm_precmd || ${precmd_functions[-1]-} != __fm_wrap ]]; then
		precmd_functions=(__fm_precmd ${precmd_functions:#__fm_*} __fm_wrap)
	fi
	if [[ ${preexec_functions[-1]-} != __fm_preexec ]]; then
		preexec_functions=(${preexec_functions:#__fm_*} __fm_preexec)
	fi
	(( ${+functions[precmd]} )) || functions[precmd]='__fm_precmd 1'
	(( ${+functions[preexec]} )) || functions[preexec]=__fm_preexec
	__fm_wrap
	return $__fm_ec
}
__fm_preexec() {
	(( __fm_running )) && return
	__fm_running=1
	builtin print -rn -- $'\e]133;fm='$__fm_nonce$';C\a'
}
precmd() {
	__fm_precmd 1
	(( ${+functions[__fm_user_precmd]} )) && __fm_user_precmd "$@"
}
preexec() {
	__fm_preexec
	(( ${+functions[__fm_user_preexec]} )) && __fm_user_preexec "$@"
}
typeset -ga precmd_functions preexec_functions
precmd_functions=(__fm_precmd ${precmd_functions:#__fm_*} __fm_wrap)
preexec_functions=(${preexec_functions:#__fm_*} __fm_preexec)
if [[ -n $__fm_allexport ]]; then unset __fm_allexport; setopt allexport; fi
`
