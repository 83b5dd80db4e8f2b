# Gives the user's ZDOTDIR back for good.
# Checked with `zsh -n` (.ci/run): shellcheck cannot read zsh.
if (( __fm_uzd_set )); then export ZDOTDIR=$__fm_uzd; else unset ZDOTDIR; fi
unset __fm_zd __fm_uzd __fm_uzd_set
