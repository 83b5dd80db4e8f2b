package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// genDocsCommand is the command that regenerates the CLI reference; the test that
// keeps docs/cli current names it.
const genDocsCommand = "go run ./cmd/fleetmux gen-docs docs/cli"

// genDocsCmd writes the CLI reference: one markdown file per command of the tree
// (hidden commands and flags left out). It is hidden: a tool for the repository,
// not for users.
func genDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the CLI reference (one markdown file per command) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return writeCLIDocs(args[0])
		},
	}
}

// writeCLIDocs makes dir hold exactly the CLI reference: the pages of cliDocs, and
// no other fleetmux*.md file (a page of a command that is gone is removed).
func writeCLIDocs(dir string) error {
	pages, err := cliDocs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-docs: %w", err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "fleetmux*.md"))
	if err != nil {
		return fmt.Errorf("gen-docs: %w", err)
	}
	for _, f := range old {
		if _, ok := pages[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return fmt.Errorf("gen-docs: %w", err)
			}
		}
	}
	for name, text := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
	}
	return nil
}

// cliDocs renders the CLI reference: file name (fleetmux_VERB_SUB.md) to page.
// The output depends on the command tree only, never on the machine: defaults
// taken from the host name or the home directory are shown as placeholders.
func cliDocs() (map[string][]byte, error) {
	root := cliRoot()
	root.CompletionOptions.DisableDefaultCmd = true
	root.InitDefaultHelpCmd()
	pages := map[string][]byte{}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		c.InitDefaultHelpFlag()
		name := docFile(c)
		if _, dup := pages[name]; dup {
			return fmt.Errorf("gen-docs: two commands write %s", name)
		}
		pages[name] = docPage(c)
		for _, sub := range docChildren(c) {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return pages, walk(root)
}

// docChildren are a command's documented subcommands, by name.
func docChildren(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			out = append(out, sub)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

func docFile(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
}

func docPage(c *cobra.Command) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", c.CommandPath(), c.Short)
	if c.Runnable() {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", c.UseLine())
	}
	if c.Long != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(c.Long))
	}
	if c.Example != "" {
		fmt.Fprintf(&b, "## Examples\n\n```\n%s\n```\n\n", strings.TrimRight(c.Example, "\n"))
	}
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(&b, "## Options\n\n```\n%s```\n\n", docFlags(fs))
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(&b, "## Options inherited from parent commands\n\n```\n%s```\n\n", docFlags(fs))
	}
	subs := docChildren(c)
	if c.HasParent() || len(subs) > 0 {
		b.WriteString("## See also\n\n")
		if p := c.Parent(); p != nil {
			fmt.Fprintf(&b, "- [%s](%s): %s\n", p.CommandPath(), docFile(p), p.Short)
		}
		for _, sub := range subs {
			fmt.Fprintf(&b, "- [%s](%s): %s\n", sub.CommandPath(), docFile(sub), sub.Short)
		}
		b.WriteString("\n")
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// docFlags is the flag set's usage with machine-dependent defaults replaced by
// placeholders (<host> for the host name, ~ for the home directory).
func docFlags(fs *pflag.FlagSet) string {
	host := sanitizeName(hostname())
	home, _ := os.UserHomeDir()
	fs.VisitAll(func(f *pflag.Flag) {
		if home != "" && home != "/" {
			f.DefValue = strings.ReplaceAll(f.DefValue, home, "~")
		}
		switch {
		case host == "":
		case f.DefValue == host:
			f.DefValue = "<host>"
		case strings.HasSuffix(f.DefValue, "-"+host):
			f.DefValue = strings.TrimSuffix(f.DefValue, host) + "<host>"
		}
	})
	return fs.FlagUsagesWrapped(0)
}
