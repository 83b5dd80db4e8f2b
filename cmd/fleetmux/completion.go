package main

import (
	"github.com/spf13/cobra"
)

// completionCmd is `fleetmux completion bash|zsh|fish`: cobra's completion scripts.
func completionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: "completion prints the completion script of a shell: verbs and flags complete on\n" +
			"Tab. Load it in the current shell, or install it for every new one:\n" +
			"  bash: source <(fleetmux completion bash)\n" +
			"        fleetmux completion bash > ~/.local/share/bash-completion/completions/fleetmux\n" +
			"  zsh:  fleetmux completion zsh > \"${fpath[1]}/_fleetmux\"   (compinit must be on)\n" +
			"  fish: fleetmux completion fish > ~/.config/fish/completions/fleetmux.fish",
		Example:   "  source <(fleetmux completion bash)",
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("completion: want one shell: bash, zsh or fish")
			}
			switch args[0] {
			case "bash", "zsh", "fish":
				return nil
			}
			return usageError("completion: shell %q: want bash, zsh or fish", args[0])
		},
		RunE: func(c *cobra.Command, args []string) error {
			w, root := c.OutOrStdout(), c.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			}
			return root.GenFishCompletion(w, true)
		},
	}
}
