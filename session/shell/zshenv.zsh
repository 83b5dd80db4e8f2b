# fleetmux shell integration for zsh (generated; not a user file)
#
# zsh runs with ZDOTDIR=DIR, and DIR's .zshenv, .zprofile, .zshrc and .zlogin are
# ours: each sources the user's file of the same name (user.zsh, with the user's
# ZDOTDIR in place while it runs), .zshrc then installs the hooks (hooks.zsh, and
# guard.zsh in a guarded session), and the last file zsh reads gives the user's ZDOTDIR
# back for good (restore.zsh). integration.go puts the files together.
#
# This part of .zshenv reads the nonce from fd 3 (a socket; see integration.go) and
# closes it before any user file runs, and remembers our ZDOTDIR and the user's.
# user.zsh follows (the user's .zshenv), and then, in a non-interactive shell, which
# reads no more startup files, restore.zsh.
#
# Checked with `zsh -n` (.ci/run): shellcheck cannot read zsh.
builtin read -r __fm_nonce <&3 2>/dev/null
exec 3<&-
typeset -g __fm_zd=$ZDOTDIR
if (( ${+FLEETMUX_USER_ZDOTDIR} )); then
	typeset -g __fm_uzd=$FLEETMUX_USER_ZDOTDIR __fm_uzd_set=1
	unset FLEETMUX_USER_ZDOTDIR
else
	typeset -g __fm_uzd=$HOME __fm_uzd_set=0
fi
