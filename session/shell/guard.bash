# fleetmux guard (generated): lines typed at the prompt are checked before they run
# shellcheck shell=bash
#
# The shell's side of the guard (guard.go has the channel and its threat model). It
# follows bashrc.bash in a guarded session's rc; sessions without a guard run without
# it, at no cost. The session passes the guard channel as fd 4.
#
# extdebug and a DEBUG trap: the trap runs before every simple command, and when it
# returns non-zero bash skips the command. A line typed at the prompt is checked at
# the first command of it that runs, wherever that is (the shell, or a subshell when
# the line starts with `( … )`, a command or process substitution: with extdebug they
# inherit the trap); the line is "new" when bash's command number (\#) changed since
# the last check, which it does once per line that runs commands (not during
# PROMPT_COMMAND or the prompt's own expansions). When the answer is no, every later
# command with the same command number and history number is skipped too: nothing of
# the line can run to change either, and PROMPT_COMMAND, which runs with the next
# history number, is not skipped. The prompt hook then sends N (nothing ran), not D.
#
# The line is `history 1`: bash has no other record of the whole line before it runs.
# So at every prompt the guard keeps every line in the history, whole and once
# (cmdhist, lithist; HISTCONTROL and HISTIGNORE emptied: ignorespace, ignoredups or a
# pattern would leave an older line there), notes the number the next entry gets
# ($HISTCMD), and denies a line whose number (noted by PS0 in the shell itself: a
# subshell's $HISTCMD differs) is not that one: it was not recorded, so `history 1`
# is not it. `set +o history` cannot be undone from a hook (bash restores
# its history state after PROMPT_COMMAND and traps), and a line typed then cannot be
# checked, `set -o history` included: a guarded shell whose history was turned off
# runs nothing more (fail closed; the shell says so).
#
# Commands also run while no line has been accepted: readline's shell-expand-line
# (Esc C-e) and its kin run the command substitutions of the unaccepted line, bind -x
# runs its command, programmable completion its functions. They run with the command
# number of the line before, so the trap would take them for more of that line. The
# trap therefore carries, as literals set at each prompt by __fm_garm, the command
# number and the history number the prompt began with: a command with that command
# number is not part of an accepted line (an accepted line that runs a command has
# the next one), nor one with the next history number (the prompt after a line: the
# line is in the history then). Such a command runs only when the guard allows it
# ($BASH_COMMAND, asked like a line; once per text until the next prompt), except the
# prompt's own: our hooks (by name, and the commands inside them) and, once
# PROMPT_COMMAND began (__fm_precmd or __fm_guard, seen by the trap in the shell) and
# __fm_gprompt found it and the prompt strings as the last prompt's hooks left them,
# PROMPT_COMMAND and PS1 up to the end of PS1, which sets __fm_acc back to 0 (so the
# prompt's hooks and PS1's command substitutions cost nothing). What changed since is
# asked about first, as a whole (an unaccepted line's ${PROMPT_COMMAND[9]:=…} plants
# an element without running a command); the snapshot it is compared with is the
# body of a function (__fm_gsnap), which an expansion cannot define. The literals, not variables, because the
# unaccepted line's expansions can assign variables ($((v=1)) any integer, ${v:=x}
# any string when v is null or unset) but not traps; so the state the trap trusts is
# either a literal, a string only a command sets and never null (__fm_acc is p only
# from the trap, __fm_udbg is - for none), or reset by PS0 after the line was
# accepted (__fm_gkey, __fm_lh): a forged value makes the trap ask or refuse, never
# skip a check.
#
# A user's DEBUG trap (at startup or set later, e.g. by bash-preexec) runs from ours,
# with $_ as it was. At each prompt __fm_garm, run by the guard, checks that our
# trap saw the very call of __fm_garm, and puts it back (keeping the new one as the
# user's) when it did not.
#
# The single-quoted strings below (SC2016) are prompt and trap text, expanded when the
# prompt is printed or the trap runs, not here.
#
# Checked with shellcheck (.ci/run).
exec {__fm_gfd}<&4 4<&-
__fm_hash='\#'
__fm_gkey=${__fm_hash@P}
__fm_gdeny='' __fm_udbg=- __fm_gseen=0 __fm_lh=-1 __fm_acc=p __fm_rlok=-
# PS0 (the shell itself, after it read a line and before it runs any of it) notes the
# line's history number (a subshell's $HISTCMD is not the shell's) and forgets the
# last line decided (the unaccepted line's expansions may have set either).
# shellcheck disable=SC2016
__fm_lhrec='${__fm_nil[__fm_lh=HISTCMD]}${__fm_nil[__fm_gkey=-1,0]}'
# The end of PS1: the prompt's own commands are done, the user's turn begins.
# shellcheck disable=SC2016
__fm_accrec='${__fm_nil[__fm_acc=0]}'
# The trap: a command of a line already checked and allowed (the command number it
# was decided with, not the prompt's: no line ran then), with no denial and no user
# trap to run, goes on without a function call; anything else (a new line, a command
# while no line is accepted, the call of __fm_garm, a denial, a user's trap) is
# __fm_dbg's. [[ ]] leaves $_ as it was. @K@ and @H@: the prompt's command and history
# numbers, put in by __fm_garm at each prompt. The prompt's own phase ($__fm_acc p)
# is tested first: most commands the trap sees are the prompt hooks', and the two
# prompt expansions of the other test are most of the trap's cost.
# shellcheck disable=SC2016
__fm_gtrap='[[ ( $__fm_acc == p || ${__fm_hash@P} == "$__fm_gkey" && ${__fm_hash@P} != @K@ && $HISTCMD == @H@ && -z $__fm_gdeny ) && $__fm_udbg == - && $BASH_COMMAND != __fm_garm ]] || __fm_dbg "$_" @K@ @H@'
__fm_gsay() { builtin printf 'fleetmux: %s\n' "$1" >&2; }
# __fm_dbg $_ K H: K and H, the command and history numbers at the prompt.
__fm_dbg() {
	[[ $BASH_COMMAND == __fm_garm ]] && __fm_gseen=1
	local __fm_n=${__fm_hash@P}
	if [[ $__fm_n == "$2" || $HISTCMD == $(($3 + 1)) ]]; then
		# No line ran a command since the prompt (or the line is over: the history
		# number is the next one's): the prompt's own (PROMPT_COMMAND and PS1 once __fm_acc is
		# p), or readline runs it, or the prompt begins.
		[[ $__fm_acc != p ]] && case $BASH_COMMAND in
		__fm_precmd | __fm_guard) [[ $__fm_acc == s ]] || { __fm_gprompt && [[ $__fm_acc == p ]] && __fm_gtrapp "$2" "$3"; } ;;
		__fm_garm) ;;
		*)
			if [[ ${FUNCNAME[1]-} != __fm_* && $__fm_rlok != *$'\x1f'"$BASH_COMMAND"$'\x1f'* ]]; then
				__fm_check "$BASH_COMMAND" r || return 1
				[[ $BASH_COMMAND == *$'\x1f'* ]] || __fm_rlok+=$'\x1f'"$BASH_COMMAND"$'\x1f'
			fi ;;
		esac
	elif [[ $__fm_n != "$__fm_gkey" ]]; then
		__fm_gkey=$__fm_n
		# PS0 sees $HISTCMD one past the line's own number once the line is in.
		if [[ $3 == 0 || $__fm_lh != $(($3 + 1)) ]]; then
			# Not in the history as its newest entry: history 1 is an older line.
			__fm_gdeny=$__fm_n:$HISTCMD
			__fm_gsay "this line cannot be checked, so it does not run: the shell did not keep it in its history (after set +o history, a guarded shell runs nothing more: start a new session)"
			return 1
		fi
		__fm_check || __fm_gdeny=$__fm_n:$HISTCMD
		[[ $__fm_gdeny == "$__fm_n:$HISTCMD" ]] && return 1
	elif [[ $__fm_gdeny == "$__fm_n:$HISTCMD" ]]; then
		return 1
	fi
	if [[ $__fm_udbg != - ]]; then
		: "$1"
		builtin eval "$__fm_udbg"
		return
	fi
	return 0
}
# The state __fm_gprompt compares: PROMPT_COMMAND (every element) and the prompt
# strings whose command substitutions run in the prompt's own phase (PS1; PS4 with
# xtrace). __fm_gsnap holds it as the last trusted prompt's hooks left it, and
# __fm_gsnapold the parts, as literals in their bodies (an expansion can assign
# variables, not define functions); __fm_gsnapset defines them anew when the state
# changed. Few commands: the trap runs for each.
__fm_gsnap() { __fm_pst=; }
__fm_gsnapold() { __fm_pco=() __fm_p1o='' __fm_p4o='' __fm_p4set=''; }
__fm_gsnapset() {
	# ${PROMPT_COMMAND[@]@A} is one word: the array's whole declare statement.
	# shellcheck disable=SC2124
	local __fm_s=${PROMPT_COMMAND[@]@A}$'\x1f'$PS1$'\x1f'${PS4-} __fm_d='' __fm_i
	__fm_gsnap
	[[ $__fm_s == "$__fm_pst" ]] && return 0
	for __fm_i in "${!PROMPT_COMMAND[@]}"; do __fm_d+=" [$__fm_i]=${PROMPT_COMMAND[__fm_i]@Q}"; done
	builtin eval "__fm_gsnap() { __fm_pst=${__fm_s@Q}; }"
	builtin eval "__fm_gsnapold() { __fm_p1o=${PS1@Q} __fm_p4o=${PS4@Q} __fm_p4set=${PS4+1}; __fm_pco=($__fm_d); }"
}
# __fm_gprompt, as the prompt begins (at __fm_precmd, or __fm_guard when precmd is
# gone): the prompt's commands run unasked (__fm_acc=p) when PROMPT_COMMAND and the
# prompt strings are as the last prompt's hooks left them. Else something changed
# them since: an accepted line, or an unaccepted line's expansion (Esc C-e performs
# ${PROMPT_COMMAND[9]:=…} without running a command). Each changed element, and a
# changed prompt string's text when it has a command substitution, is asked about
# like a line (kind r); when all are allowed the new state is trusted (garm takes it
# as the snapshot), else the old state is put back and nothing of this prompt runs
# unasked (__fm_acc=s, until the end of PS1: the elements already copied for this
# prompt are asked about command by command). It runs from the trap (so without it).
__fm_gprompt() {
	__fm_acc=p
	__fm_gsnap
	# shellcheck disable=SC2199 # @A: the array's declare statement, one word
	[[ ${PROMPT_COMMAND[@]@A}$'\x1f'$PS1$'\x1f'${PS4-} == "$__fm_pst" ]] && return 0
	__fm_gsnapold
	local __fm_i __fm_t __fm_ok=1
	for __fm_i in "${!PROMPT_COMMAND[@]}"; do
		__fm_t=${PROMPT_COMMAND[__fm_i]}
		[[ -n ${__fm_pco[__fm_i]+1} && $__fm_t == "${__fm_pco[__fm_i]}" ]] && continue
		__fm_t=${__fm_t#__fm_precmd}
		__fm_t=${__fm_t#$'\n'}
		[[ -z $__fm_t || $__fm_t == __fm_guard ]] && continue
		__fm_check "$__fm_t" r || { __fm_ok=0; break; }
	done
	if [[ $__fm_ok == 1 && $PS1 != "$__fm_p1o" ]]; then
		__fm_t=${PS1//"$__fm_accrec"/}
		# The text our hooks put in PS1 (bashrc.bash), quoted as it stands there.
		# shellcheck disable=SC2016
		__fm_t=${__fm_t/'\[${__fm_nil[${PROMPT_COMMAND[2147483647]:=__fm_guard}]}'*'${__fm_A}\]'/}
		# shellcheck disable=SC2016
		__fm_t=${__fm_t//'\[${__fm_B}\]'/}
		# shellcheck disable=SC2016 # a command substitution in the text
		if [[ $__fm_t == *'$('* || $__fm_t == *$'\x60'* ]]; then __fm_check "$__fm_t" r || __fm_ok=0; fi
	fi
	# shellcheck disable=SC2016 # a command substitution in the text
	if [[ $__fm_ok == 1 && ${PS4-} != "$__fm_p4o" && ( ${PS4-} == *'$('* || ${PS4-} == *$'\x60'* ) ]]; then
		__fm_check "$PS4" r || __fm_ok=0
	fi
	[[ $__fm_ok == 1 ]] && return 0
	__fm_acc=s
	# An element 0 without __fm_precmd stays (precmd did not run: __fm_guard then
	# ends the block, and __fm_arm puts precmd back in front of it).
	__fm_t=${PROMPT_COMMAND[0]-}
	builtin unset PROMPT_COMMAND
	for __fm_i in "${!__fm_pco[@]}"; do PROMPT_COMMAND[__fm_i]=${__fm_pco[__fm_i]}; done
	[[ $__fm_t == __fm_precmd* ]] || PROMPT_COMMAND[0]=$__fm_t
	PS1=$__fm_p1o
	if [[ -n $__fm_p4set ]]; then PS4=$__fm_p4o; else builtin unset PS4; fi
	__fm_gsay "PROMPT_COMMAND and the prompt strings changed while no line was accepted or in a way the policy does not allow: they are put back as they were"
	return 0
}
# __fm_gtrapp K H, once __fm_gprompt trusted the prompt (__fm_acc p): until
# __fm_garm sets this prompt's trap, the trap is the one-test form of the same trap
# with the same numbers. It lets exactly what the full trap lets through without
# __fm_dbg while __fm_acc is p; otherwise it calls __fm_dbg, which decides what
# the full trap's other test would have let through the same way (a command of a
# checked, allowed line goes on). The prompt hooks' ≈45 commands each pay for its
# one test instead of the full one.
__fm_gtrapp() {
	[[ -n $1 && $1 != *[!0-9]* && -n $2 && $2 != *[!0-9]* ]] || return 0
	# shellcheck disable=SC2064 # the numbers go in now, as literals
	builtin trap "[[ \$__fm_acc == p && \$__fm_udbg == - && \$BASH_COMMAND != __fm_garm ]] || __fm_dbg \"\$_\" $1 $2" DEBUG
}
__fm_gtrapset() {
	local __fm_t=${__fm_gtrap//@K@/${__fm_hash@P}}
	# shellcheck disable=SC2064 # this prompt's numbers go in now, as literals
	builtin trap "${__fm_t//@H@/$HISTCMD}" DEBUG
}
__fm_check() {
	local __fm_c=${SRANDOM:-$RANDOM$RANDOM$RANDOM} __fm_a __fm_a2 __fm_cc __fm_v __fm_r __fm_m
	# Late answers to abandoned lines go; end of file means the session's end is
	# closed (writing would then kill the shell with SIGPIPE).
	while builtin read -t 0 -u "$__fm_gfd"; do
		IFS= builtin read -r -t 1 -u "$__fm_gfd" __fm_a || {
			__fm_gsay "the guard is gone, so the line does not run"
			return 1
		}
	done
	local __fm_ask=1
	while :; do
		# __fm_check: the line (history 1); __fm_check CMD r: a command run while no
		# line is accepted. Asked again when a new agent says so (the one asked may
		# have gone before it answered).
		if [[ $__fm_ask == 1 ]]; then
			__fm_ask=0
			# shellcheck disable=SC2154 # __fm_nonce is bashrc.bash's
			if [[ $2 == r ]]; then
				builtin printf 'Q %s 0 %s r\n%s\0' "$__fm_nonce" "$__fm_c" "$1"
			else
				builtin printf 'Q %s %s %s h\n' "$__fm_nonce" "$__fm_gkey" "$__fm_c" && HISTTIMEFORMAT='' builtin history 1 && builtin printf '\0'
			fi 1>&"$__fm_gfd" 2>/dev/null || {
				__fm_gsay "the guard cannot be asked, so the line does not run"
				return 1
			}
		fi
		# -t: wait for the answer's first byte with poll, then read it (a program may
		# have made the socket non-blocking; the session makes it blocking again
		# before it answers); an approval may take long, but not a day. The rest of
		# the answer, written at once, is read without a poll per byte (bash reads a
		# socket byte by byte). Either read failing is the error (SC2015).
		# shellcheck disable=SC2015
		IFS= builtin read -r -t 86400 -N 1 -u "$__fm_gfd" __fm_a &&
			IFS=$'\t' builtin read -r -u "$__fm_gfd" __fm_a2 __fm_cc __fm_v __fm_r __fm_m || {
			__fm_gsay "the guard did not answer, so the line does not run"
			return 1
		}
		if [[ $__fm_a$__fm_a2 != fm ]]; then
			__fm_gsay "the guard's answer is garbled, so the line does not run"
			return 1
		fi
		[[ $__fm_cc == "$__fm_c" ]] && break
		[[ $__fm_cc == '*' && $__fm_v == again ]] && __fm_ask=1
	done
	case $__fm_v in
	allow) return 0 ;;
	deny)
		if [[ $__fm_r == - ]]; then __fm_gsay "denied${__fm_m:+: $__fm_m}"; else __fm_gsay "denied by rule $__fm_r${__fm_m:+: $__fm_m}"; fi ;;
	*) __fm_gsay "the guard's answer is garbled, so the line does not run" ;;
	esac
	return 1
}
__fm_garm() {
	# Nothing to do (every prompt but a few): few commands, as the trap runs for each.
	# The trap gets this prompt's numbers; PS1, expanded next, is the prompt's own.
	if [[ $__fm_gseen == 1 && $- == *T* && $BASHOPTS == *cmdhist*extdebug*lithist* && -z $HISTCONTROL && -z ${HISTIGNORE-} && ${HISTSIZE-} != 0 && $PS0 == *"$__fm_lhrec" && $PS1 == *"$__fm_accrec" ]]; then
		__fm_gseen=0 __fm_lh=-1 __fm_gdeny='' __fm_rlok=-
		[[ $__fm_acc == s ]] || { __fm_acc=p; __fm_gsnapset; }
		__fm_gtrapset
		return 0
	fi
	if [[ $__fm_gseen != 1 ]]; then
		local __fm_t
		# (A function sees the DEBUG trap only with extdebug on when it is called.)
		__fm_t=$(trap -p DEBUG)
		if [[ -n $__fm_t && $__fm_t != *__fm_dbg* ]]; then
			__fm_t=${__fm_t#trap -- }
			builtin eval "__fm_udbg=${__fm_t% DEBUG}"
		fi
	fi
	__fm_gtrapset
	__fm_gseen=0 __fm_gdeny=
	builtin shopt -q extdebug || builtin shopt -s extdebug
	# extdebug turns functrace on, set +T alone turns it off: a subshell (a line
	# starting with one) would then run without the trap.
	[[ $- == *T* ]] || builtin set -T
	builtin shopt -q cmdhist || builtin shopt -s cmdhist
	builtin shopt -q lithist || builtin shopt -s lithist
	[[ -n $HISTCONTROL ]] && HISTCONTROL=
	[[ -n ${HISTIGNORE-} ]] && HISTIGNORE=
	[[ ${HISTSIZE-} == 0 ]] && HISTSIZE=500
	[[ $PS0 == *"$__fm_lhrec" ]] || PS0=${PS0//"$__fm_lhrec"/}$__fm_lhrec
	[[ $PS1 == *"$__fm_accrec" ]] || PS1=${PS1//"$__fm_accrec"/}$__fm_accrec
	__fm_lh=-1 __fm_rlok=-
	[[ $__fm_acc == s ]] || { __fm_acc=p; __fm_gsnapset; }
	return 0
}
builtin shopt -s extdebug
__fm_garm
builtin readonly -f __fm_dbg __fm_check __fm_gsay __fm_garm __fm_gtrapset __fm_gtrapp __fm_gsnapset __fm_gprompt
builtin readonly __fm_gfd __fm_hash __fm_lhrec __fm_accrec __fm_gtrap
