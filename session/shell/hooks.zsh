# fleetmux shell integration for zsh: the hooks (generated; not a user file)
#
# They follow the user's .zshrc in our .zshrc. __fm_precmd sends D (a command ran:
# preexec set __fm_running) or N (none did: an empty, rejected or interrupted line)
# with $?, then the cwd, once per prompt. It is both in the precmd function (which zsh
# calls before the precmd_functions, so $? is the command's) and first in
# precmd_functions (where it acts only when the function is not ours), so clearing
# either leaves the other; each prompt it puts itself, __fm_wrap (last, to re-wrap a
# prompt a theme rewrote) and the preexec hook back. preexec is both the function and
# in preexec_functions too. A user's own precmd/preexec functions defined before us
# keep running, called from ours. PS1 is kept unexported since it holds the marks.
#
# Checked with `zsh -n` (.ci/run): shellcheck cannot read zsh.
if [[ -o allexport ]]; then setopt no_allexport; __fm_allexport=1; fi
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
	local __fm_k=N __fm_h=$HOST __fm_p=$PWD __fm_u
	# The cwd: OSC 7's file://HOST/PATH, where a host or path with a control
	# character, a byte past ASCII the locale does not print, or % is percent-encoded
	# (__fm_url), so that no byte of it can end the mark early or carry the nonce into
	# the output (the session decodes it). One pattern test decides, so a plain path
	# costs nothing more. Encoded before D is sent: from D to the prompt
	# the shell only prints.
	if [[ $__fm_h$__fm_p == *[^[:print:]]* || $__fm_h$__fm_p == *%* || $__fm_h == */* ]]; then
		__fm_url "$__fm_h" /
		__fm_h=$__fm_u
		__fm_url "$__fm_p" ''
		__fm_p=$__fm_u
	fi
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
	builtin print -rn -- $'\e]7;fm='"$__fm_nonce"';file://'"$__fm_h$__fm_p"$'\a'
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
# __fm_url TEXT C sets __fm_u (its caller's local) to TEXT with %, C, and every byte
# that is not printable ASCII percent-encoded: byte by byte, in the C locale, with
# zsh's own options whatever the user set.
__fm_url() {
	emulate -L zsh
	local LC_ALL=C __fm_c
	local -i __fm_i
	__fm_u=
	for ((__fm_i = 1; __fm_i <= $#1; __fm_i++)); do
		__fm_c=${1[__fm_i]}
		if [[ $__fm_c == [^[:print:]] || $__fm_c == % || $__fm_c == "$2" ]]; then
			builtin printf -v __fm_c '%%%02X' "'$__fm_c"
		fi
		__fm_u+=$__fm_c
	done
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
