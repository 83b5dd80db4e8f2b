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
