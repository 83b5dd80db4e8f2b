# Sources the user's startup file named by __fm_f (integration.go sets it on the line
# before this part: .zprofile, .zshrc or .zlogin; .zshenv when unset) at top level,
# not in a function, so that its typesets stay global, with the user's ZDOTDIR in
# place while it runs.
# Checked with `zsh -n` (.ci/run): shellcheck cannot read zsh.
: ${__fm_f:=.zshenv}
if (( __fm_uzd_set )); then export ZDOTDIR=$__fm_uzd; else unset ZDOTDIR; fi
[[ -r $__fm_uzd/$__fm_f ]] && builtin source -- "$__fm_uzd/$__fm_f"
if (( ${+ZDOTDIR} )); then __fm_uzd=$ZDOTDIR __fm_uzd_set=1; fi
ZDOTDIR=$__fm_zd
unset __fm_f
