# fleetmux shell integration for bash (generated; not a user file)
# shellcheck shell=bash
#
# Our --rcfile: `bash --rcfile DIR/bashrc -i`. It reads the nonce from fd 3 (a socket
# the session holds the other end of; see integration.go), closes fd 3 before any user
# file runs, sources the user's ~/.bashrc (bash itself reads /etc/bash.bashrc), then
# installs the hooks. In a guarded session guard.bash follows this file in the same rc.
#
# The hooks, and how each survives users and themes that replace them:
#
#   - __fm_precmd, first in PROMPT_COMMAND[0], sends D (a command ran: PS0 set
#     __fm_running) or N (none did: an empty, rejected or interrupted line) with $?,
#     then the cwd (OSC 7), before any other prompt hook can print into the block. It
#     only trusts $? when it is first in PROMPT_COMMAND[0] (else another command ran
#     before it in the same element).
#   - __fm_guard, last in the PROMPT_COMMAND array (bash 5.1+ runs every element with
#     the command's $? restored), does what precmd did when precmd did not run (a
#     scalar `PROMPT_COMMAND=...` replaces element 0 only), puts precmd back, moves
#     itself last again, and re-wraps PS1 (A and B through variable references, so
#     the nonce is never in PS1's text) and PS0 (C, and __fm_running set silently
#     through an arithmetic subscript).
#   - PS1 and PS0 themselves put the guard back (a `:=` expansion inside an arithmetic
#     subscript prints nothing) when the whole array was replaced or unset, and sends
#     R;<seq> when no hook of ours ran since the last prompt: bash re-prompts without
#     running PROMPT_COMMAND after a failed history expansion (`echo hi!x`), and a
#     prompt whose hooks are gone comes back the same way. The sequence number tells a
#     new prompt from a redraw of the same one (readline repeats the expanded prompt's
#     bytes).
#
# The nonce stays in unexported variables; nothing of it is in argv or environ.
#
# Checked with shellcheck (.ci/run).
builtin read -r __fm_nonce <&3 2>/dev/null
exec 3<&-
# shellcheck source=/dev/null # the user's own file: nothing to follow
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
# __fm_end CODE sends D or N with CODE, then the cwd: OSC 7's file://HOST/PATH, where
# a host or path with a control character, a byte past ASCII the locale does not print,
# or % is percent-encoded (__fm_pct), so that no byte of it can end the mark early or
# carry the nonce into the output (the session decodes it). One pattern test decides,
# so a plain path costs nothing more.
__fm_end() {
	local __fm_k=N __fm_h=$HOSTNAME __fm_p=$PWD __fm_u
	# A line the guard denied (guarded sessions only) ran nothing: N.
	# shellcheck disable=SC2154 # __fm_hash is guard.bash's (unset without a guard)
	if [[ $__fm_running == 1 ]] && [[ -z $__fm_gdeny || ${__fm_gdeny%%:*} != "${__fm_hash@P}" ]]; then __fm_k=D; fi
	__fm_running=0 __fm_pc=1
	if [[ $__fm_h$__fm_p == *[![:print:]]* || $__fm_h$__fm_p == *%* || $__fm_h == */* ]]; then
		__fm_pct "$__fm_h" /
		__fm_h=$__fm_u
		__fm_pct "$__fm_p" ''
		__fm_p=$__fm_u
	fi
	builtin printf '\e]133;fm=%s;%s;%s\a\e]7;fm=%s;file://%s%s\a' "$__fm_nonce" "$__fm_k" "$1" "$__fm_nonce" "$__fm_h" "$__fm_p"
}
# __fm_pct TEXT C sets __fm_u (its caller's local) to TEXT with %, C, and every byte
# that is not printable ASCII percent-encoded: byte by byte, in the C locale.
__fm_pct() {
	local LC_ALL=C __fm_i __fm_c
	__fm_u=''
	for ((__fm_i = 0; __fm_i < ${#1}; __fm_i++)); do
		__fm_c=${1:__fm_i:1}
		case $__fm_c in
		% | [![:print:]] | "$2") builtin printf -v __fm_c '%%%02X' "'$__fm_c" ;;
		esac
		__fm_u+=$__fm_c
	done
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
		# Nothing replaced (every prompt but a few): leave at once. The quoted
		# ${__fm_A} is the text PS1 holds, not its value.
		# shellcheck disable=SC2016
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
		# Before bash 5.1, PROMPT_COMMAND is one string.
		# shellcheck disable=SC2128,SC2178,SC2179
		case $PROMPT_COMMAND in __fm_precmd*) ;; *) PROMPT_COMMAND="__fm_precmd${PROMPT_COMMAND:+$'\n'$PROMPT_COMMAND}" ;; esac
		# shellcheck disable=SC2128,SC2179
		case $PROMPT_COMMAND in *__fm_guard) ;; *) PROMPT_COMMAND+=$'\n__fm_guard' ;; esac
	fi
	# The prompt strings hold variable references, expanded as each prompt is printed.
	# shellcheck disable=SC2016
	case $PS1 in *'${__fm_A}'*) ;; *) PS1='\[${__fm_nil[${PROMPT_COMMAND[2147483647]:=__fm_guard}]}${__fm_nil[__fm_seq+=1]}${__fm_R[__fm_pc]}${__fm_R[__fm_pc]:+$__fm_seq$__fm_bel}${__fm_nil[__fm_pc=0]}${__fm_A}\]'"$PS1"'\[${__fm_B}\]' ;; esac
	# shellcheck disable=SC2016
	case $PS0 in *'__fm_running=1'*) ;; *) PS0="$PS0"'${__fm_nil[${PROMPT_COMMAND[2147483647]:=__fm_guard}]}${__fm_nil[__fm_running=1]:-}${__fm_C}' ;; esac
}
__fm_arm
if [[ -n $__fm_allexport ]]; then unset __fm_allexport; set -a; fi
