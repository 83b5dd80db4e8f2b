# fleetmux guard (generated): lines are checked before they are accepted
#
# The shell's side of the guard (guard.go has the channel and its threat model). It
# follows hooks.zsh in a guarded session's .zshrc; the session passes the guard
# channel as fd 4.
#
# The accept widgets (accept-line and its kin) are wrapped: before the line is
# accepted, $PREBUFFER$BUFFER (the whole command so far, continuation lines too) is
# sent to the session; when the answer is no, the shell says why and drops the line
# (send-break: the continuation too), so nothing of it runs and the prompt hook sends
# N. A user's widget of the same name (a plugin's accept-line wrapper) runs from ours;
# at each prompt __fm_garm wraps the widgets again when something replaced them.
#
# Editing commands run code too, before any line is accepted: Tab (expand-or-complete
# and the completion widgets, whose completers may include _expand) and the expansion
# widgets perform the unaccepted line's command substitutions, arithmetic, glob
# qualifiers (e:...:) and parameter expansions (${(e)...}, ${v::=...}, which can
# assign any variable, $functions[...] included, so no state of the shell's can tell
# them from the prompt's own expansions). So these widgets are wrapped too: when the
# line holds anything an expansion can run or assign through ($, a backquote, a
# parenthesis, ~[), the guard is asked about the line first (kind r: not an accepted
# line) and a denied one is not expanded (the shell says why). A plugin's widget that
# expands the line itself without calling one of these is not covered.
#
# Checked with `zsh -n` (.ci/run): shellcheck cannot read zsh.
zmodload -i zsh/zleparameter zsh/system 2>/dev/null
exec {__fm_gfd}<&4 4<&-
typeset -gi __fm_gkey=0
typeset -ga __fm_gwidgets
__fm_gwidgets=(accept-line accept-and-hold accept-line-and-down-history accept-and-infer-next-history)
typeset -ga __fm_gxwidgets
__fm_gxwidgets=(expand-or-complete expand-or-complete-prefix expand-word menu-expand-or-complete list-expand expand-cmd-path complete-word menu-complete reverse-menu-complete list-choices delete-char-or-list menu-select)
# Output from a widget: zle -I moves below the line typed, and redraws after.
__fm_gsay() {
	zle -I
	builtin print -ru2 -- "fleetmux: $1"
}
__fm_check() {
	local __fm_c=$RANDOM$RANDOM$RANDOM$RANDOM __fm_a __fm_cc __fm_v __fm_r __fm_m
	if [[ $1 == *$'\0'* ]]; then
		__fm_gsay "a line with a NUL byte cannot be checked, so it does not run"
		return 1
	fi
	# Late answers to abandoned lines go; end of file means the session's end is
	# closed (writing would then kill the shell with SIGPIPE).
	local -i __fm_st
	while :; do
		sysread -t 0 -i $__fm_gfd __fm_a
		__fm_st=$?
		(( __fm_st == 0 )) || break
	done
	if (( __fm_st == 5 )); then
		__fm_gsay "the guard is gone, so the line does not run"
		return 1
	fi
	# __fm_check LINE: a line to accept; __fm_check TEXT r: a line to expand.
	local __fm_k=0 __fm_kind=r
	if [[ $2 != r ]]; then
		(( __fm_gkey++ ))
		__fm_k=$__fm_gkey __fm_kind=l
	fi
	local -i __fm_ask=1
	while :; do
		# Asked again when a new agent says so (the one asked may have gone before it
		# answered).
		if (( __fm_ask )); then
			__fm_ask=0
			{ builtin print -rn -- "Q $__fm_nonce $__fm_k $__fm_c $__fm_kind"$'\n'"$1"$'\0' } 2>/dev/null >&$__fm_gfd || {
				__fm_gsay "the guard cannot be asked, so the line does not run"
				return 1
			}
		fi
		IFS=$'\t' builtin read -r -t 86400 __fm_a __fm_cc __fm_v __fm_r __fm_m <&$__fm_gfd || {
			__fm_gsay "the guard did not answer, so the line does not run"
			return 1
		}
		if [[ $__fm_a != fm ]]; then
			__fm_gsay "the guard's answer is garbled, so the line does not run"
			return 1
		fi
		[[ $__fm_cc == $__fm_c ]] && break
		[[ $__fm_cc == '*' && $__fm_v == again ]] && __fm_ask=1
	done
	case $__fm_v in
	(allow) return 0 ;;
	(deny)
		if [[ $__fm_r == - ]]; then __fm_gsay "denied${__fm_m:+: $__fm_m}"; else __fm_gsay "denied by rule $__fm_r${__fm_m:+: $__fm_m}"; fi ;;
	(*) __fm_gsay "the guard's answer is garbled, so the line does not run" ;;
	esac
	return 1
}
__fm_accept() {
	# A wrapper that calls the widget it replaced, which is ours, while we accept.
	if (( __fm_gin )); then
		zle .$__fm_gw
		return
	fi
	local __fm_l=$PREBUFFER$BUFFER __fm_gw=$WIDGET
	local -i __fm_gin=1
	(( ${__fm_gwidgets[(Ie)$__fm_gw]} )) || __fm_gw=accept-line
	if [[ $__fm_l == *[^[:space:]]* ]] && ! __fm_check "$__fm_l"; then
		BUFFER=
		zle send-break
		return 1
	fi
	zle __fm_orig_$__fm_gw
}
__fm_expand() {
	# A wrapper that calls the widget it replaced, which is ours, while we expand.
	if (( __fm_gxin )); then
		zle .$WIDGET -- "$@"
		return
	fi
	local __fm_l=$PREBUFFER$BUFFER
	local -i __fm_gxin=1
	if [[ $__fm_l == *[\$\(]* || $__fm_l == *$'\x60'* || $__fm_l == *'~['* ]] && ! __fm_check "$__fm_l" r; then
		return 1
	fi
	zle __fm_orig_$WIDGET -- "$@"
}
__fm_garm() {
	local __fm_w
	for __fm_w in $__fm_gwidgets; do
		[[ ${widgets[$__fm_w]-} == user:__fm_accept ]] && continue
		zle -A $__fm_w __fm_orig_$__fm_w 2>/dev/null || zle -A .$__fm_w __fm_orig_$__fm_w
		zle -N $__fm_w __fm_accept
	done
	for __fm_w in $__fm_gxwidgets; do
		[[ ${widgets[$__fm_w]-} == user:__fm_expand ]] && continue
		zle -A $__fm_w __fm_orig_$__fm_w 2>/dev/null || zle -A .$__fm_w __fm_orig_$__fm_w 2>/dev/null || continue
		zle -N $__fm_w __fm_expand
	done
	return 0
}
__fm_garm
typeset -gr __fm_gfd
