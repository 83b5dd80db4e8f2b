package guard

import (
	"context"
	"regexp"
	"strings"
)

// checkCreate decides a new session's argv and environment: nothing yet.
func (g *Guard) checkCreate(ctx context.Context, req Request) error { return nil }

// plainWord is a word the shell reads as it is, unquoted.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ArgvCommand is argv as the command line a shell would read it as: each word
// shell-quoted (single quotes where needed), joined by spaces.
func ArgvCommand(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if plainWord.MatchString(a) {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}
