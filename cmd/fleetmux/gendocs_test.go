package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCLIDocs fails when docs/cli is not what the command tree renders: a verb,
// flag or help text changed without the reference being regenerated.
func TestCLIDocs(t *testing.T) {
	want, err := cliDocs()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "docs", "cli")
	have, err := filepath.Glob(filepath.Join(dir, "fleetmux*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	seen := map[string]bool{}
	for _, f := range have {
		name := filepath.Base(f)
		seen[name] = true
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[name]
		switch {
		case !ok:
			problems = append(problems, name+": no such command any more")
		case !bytes.Equal(text, w):
			problems = append(problems, name+": "+firstDiff(string(text), string(w)))
		}
	}
	for name := range want {
		if !seen[name] {
			problems = append(problems, name+": missing")
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("docs/cli is out of date; regenerate it from the repository root with\n\t%s\n%s",
			genDocsCommand, strings.Join(problems, "\n"))
	}
}

// firstDiff names the first line where have and want differ.
func firstDiff(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var a, b string
		if i < len(h) {
			a = h[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ": docs/cli has " + quoteLine(a) + ", the CLI " + quoteLine(b)
		}
	}
	return "differs"
}

func quoteLine(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return "\"" + s + "\""
}

// TestCLIDocsStable: the reference is the same on every machine (no host name or
// home directory in it) and in every run.
func TestCLIDocsStable(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	a, err := cliDocs()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())
	b, err := cliDocs()
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range a {
		if !bytes.Equal(text, b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
		if host := sanitizeName(hostname()); host != "" && bytes.Contains(text, []byte("\""+host+"\"")) {
			t.Errorf("%s holds this machine's host name", name)
		}
		if bytes.Contains(text, []byte(home)) {
			t.Errorf("%s holds a home directory", name)
		}
	}
}

// TestGenDocsWritesTree: gen-docs writes the pages and removes a page whose
// command is gone.
func TestGenDocsWritesTree(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "fleetmux_gone.md")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(t.Context(), []string{"gen-docs", dir}, &out, &errb); err != nil {
		t.Fatalf("gen-docs: %v (%s)", err, errb.String())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the page of a command that is gone stays: %v", err)
	}
	for _, name := range []string{"fleetmux.md", "fleetmux_run.md", "fleetmux_dev.md", "fleetmux_token_create.md"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
