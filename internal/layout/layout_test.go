// Package layout holds the test that enforces the import rules of DESIGN.md's layout
// table. It has no code of its own.
package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fleetmux/fleetmux"

// rule is one row of DESIGN.md's layout table. Paths in it are module-relative ("api")
// for this module's packages and full import paths for others; each names a package
// and everything under it. The standard library is always allowed.
type rule struct {
	dir string // the packages the rule is about: dir and everything under it
	// only, when non-nil, lists what direct imports may come from.
	only []string
	// depsToo applies only to every dependency, not just to direct imports.
	depsToo bool
	// ours, when non-nil, lists which of this module's packages may be imported
	// directly (only already implies it).
	ours []string
	// never lists packages that must not be imported, directly or not.
	never []string
	// notDirect lists packages, the standard library's too, that must not be
	// imported directly (a dependency may use them).
	notDirect []string
}

// rules is DESIGN.md's layout table. session also may import golang.org/x/sys (the
// dependency of x/term it uses directly for its ioctls) and api (the words and limits
// it shares with the rest; see README.md).
var rules = []rule{
	{dir: "api", only: []string{}, depsToo: true},
	{dir: "session", only: []string{
		"api", "holder", "internal/delay", "internal/ptyio", "internal/ring", "internal/sandbox", "github.com/creack/pty", "golang.org/x/term", "golang.org/x/sys", "github.com/charmbracelet/x/vt",
	}},
	{dir: "replay", only: []string{"api"}},
	// the session holder (sessions that outlive the agent): the process that keeps
	// the PTYs, and the client of its protocol; it knows nothing of sessions' marks,
	// blocks or screens.
	{dir: "holder", only: []string{"api", "internal/datadir", "internal/ptyio", "internal/reclaim", "internal/ring", "github.com/creack/pty", "golang.org/x/sys"},
		never: []string{"session", "node", "controller", "transport"}},
	{dir: "transport", only: []string{"api", "internal/datadir", "github.com/nats-io", "github.com/hashicorp/memberlist"}},
	// one idea each: the fleet's NATS identities stand alone (no connection), gossip
	// knows nothing of NATS, presence reads a connection and the identities
	{dir: "transport/natsauth", only: []string{"api", "internal/datadir", "github.com/nats-io"}},
	{dir: "transport/gossip", only: []string{"api", "internal/datadir", "transport/natsauth", "github.com/hashicorp/memberlist"}},
	{dir: "transport/presence", only: []string{"api", "transport", "github.com/nats-io"}},
	{dir: "trust", only: []string{"api", "golang.org/x/crypto"}},
	{dir: "policy", only: []string{"api", "go.yaml.in/yaml/v3"}},
	// everything the node decides before it acts: policy decisions, writer lease,
	// approvals, secrets, redaction settings; it reaches the node only through
	// interfaces of its own.
	{dir: "guard", ours: []string{"api", "policy", "internal/datadir"}, never: []string{"session", "node", "controller", "transport"}},
	{dir: "node", ours: []string{"api", "agent", "session", "holder", "replay", "guard", "trust", "policy", "proc", "keeper", "internal/datadir", "internal/delay", "internal/reclaim", "internal/sandbox", "tracing"}, never: []string{"controller", "transport"}},
	// coding agents: drivers, screen rules, the state machine and the node's
	// tracker; it reaches sessions only through an interface of its own.
	{dir: "agent", ours: []string{"api", "internal/datadir"}, never: []string{"session", "node", "controller", "transport", "guard"}},
	// one-shot processes without a terminal (exec): start, capture, kill; the
	// node decides whether one may run before it asks for it.
	{dir: "proc", only: []string{"api", "internal/ring"}},
	// background execs that outlive the node agent: the keeper process (the
	// agent's binary re-executed) and the exec's files it writes and the agent reads
	{dir: "keeper", only: []string{"api", "proc", "policy", "internal/datadir", "internal/sandbox", "golang.org/x/sys"},
		never: []string{"session", "node", "controller", "transport", "guard"}},
	// the catch-up digest: a snapshot in, text within a token budget out (pure)
	{dir: "digest", only: []string{"api"}},
	// OpenTelemetry traces: the OTEL_* configuration, the SDK and exporter, the
	// trace context in NATS headers; off unless configured
	{dir: "tracing", only: []string{"api", "go.opentelemetry.io/otel"}},
	// the fleet core: the front doors are packages of their own, over interfaces
	// the controller satisfies; it serves no HTTP itself.
	{dir: "controller", ours: []string{"api", "digest", "replay", "trust", "policy", "internal/datadir", "internal/delay", "tracing"},
		never: []string{"node", "transport", "sshd", "httpapi", "mcpserver"}, notDirect: []string{"net/http"}},
	// the HTTP front door: it drives the controller through its own Fleet
	// interface; cmd builds /mcp's handler and passes it in.
	{dir: "httpapi", only: []string{"api", "console", "internal/netcap", "tracing", "github.com/prometheus/client_golang", "github.com/coder/websocket", "go.opentelemetry.io/otel"},
		never: []string{"controller", "node", "transport", "sshd", "mcpserver"}},
	{dir: "mcpserver", only: []string{"api", "tracing", "github.com/modelcontextprotocol/go-sdk", "github.com/google/jsonschema-go", "go.opentelemetry.io/otel"},
		never: []string{"controller", "node", "transport"}},
	// the SSH front door: it drives the controller through its own Fleet
	// interface, which cmd wires the controller into.
	{dir: "sshd", only: []string{"api", "internal/datadir", "golang.org/x/crypto", "internal/netcap"},
		never: []string{"controller", "node", "transport"}},
	{dir: "client", only: []string{"api", "github.com/coder/websocket"}},
	// the web console's files (pages, vendored assets), embedded; httpapi serves them
	{dir: "console", only: []string{}, depsToo: true},
	// internal helpers that node and controller share (DESIGN's "internal/… (others)")
	{dir: "internal/delay", only: []string{"api"}},
	{dir: "internal/datadir", only: []string{}, depsToo: true},
	{dir: "internal/reclaim", only: []string{}, depsToo: true},
	{dir: "internal/netcap", only: []string{}, depsToo: true},
	// kernel confinement of a session's program (Landlock, namespaces, cgroups)
	{dir: "internal/sandbox", only: []string{"api", "golang.org/x/sys"}},
	// one offset-addressed ring (holder's raw output, session's scrollback) and the
	// PTY and child waits both use
	{dir: "internal/ring", only: []string{}, depsToo: true},
	{dir: "internal/ptyio", only: []string{"golang.org/x/sys"}},
}

// protocolLibraries: a package that speaks a protocol does it through the maintained
// library DESIGN.md pins (Dependencies), never hand-written framing or a deprecated one.
var protocolLibraries = []struct {
	dir        string
	uses       string
	neverUses  string
	handFramed string // a file whose presence means hand-written framing
}{
	{dir: "client", uses: "github.com/coder/websocket", neverUses: "golang.org/x/net/websocket", handFramed: "client/ws.go"},
	{dir: "httpapi", uses: "github.com/coder/websocket", neverUses: "golang.org/x/net/websocket"},
}

func TestProtocolLibraries(t *testing.T) {
	pkgs := listPackages(t)
	root := moduleRoot(t)
	for _, l := range protocolLibraries {
		i := slices.IndexFunc(pkgs, func(p pkg) bool { return p.ImportPath == full(l.dir) })
		if i < 0 {
			t.Errorf("no package %s", full(l.dir))
			continue
		}
		if !slices.Contains(pkgs[i].Deps, l.uses) {
			t.Errorf("%s does not use %s (DESIGN.md, Dependencies)", l.dir, l.uses)
		}
		if slices.Contains(pkgs[i].Deps, l.neverUses) {
			t.Errorf("%s depends on %s: use %s", l.dir, l.neverUses, l.uses)
		}
		if _, err := os.Stat(filepath.Join(root, l.handFramed)); l.handFramed != "" && err == nil {
			t.Errorf("%s exists: %s's protocol goes through %s", l.handFramed, l.dir, l.uses)
		}
	}
}

// pkg is what go list tells about one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range rules {
		t.Run(r.dir, func(t *testing.T) {
			var mine []pkg
			for _, p := range pkgs {
				if under(p.ImportPath, full(r.dir)) {
					mine = append(mine, p)
				}
			}
			if len(mine) == 0 {
				t.Skipf("no package %s/%s yet", module, r.dir)
			}
			for _, p := range mine {
				if p.Error != nil {
					t.Logf("%s does not load (its own tests will say why): %s", p.ImportPath, p.Error.Err)
				}
			}
			for _, v := range r.check(mine) {
				t.Error(v)
			}
		})
	}
}

// check returns one message per import that breaks the rule.
func (r rule) check(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if why := r.directProblem(imp); why != "" {
				out = append(out, fmt.Sprintf("%s imports %s: %s (DESIGN.md, layout)", p.ImportPath, imp, why))
			}
		}
		for _, dep := range p.Deps {
			if slices.Contains(p.Imports, dep) {
				continue // reported above
			}
			if r.depsToo && !stdlib(dep) && !under(dep, full(r.dir)) && !underAny(dep, r.only) {
				out = append(out, fmt.Sprintf("%s depends on %s: %s may depend on %s (DESIGN.md, layout)", p.ImportPath, dep, r.dir, r.allowed()))
			}
			if underAny(dep, r.never) {
				out = append(out, fmt.Sprintf("%s depends on %s: %s must never import %s (DESIGN.md, layout)", p.ImportPath, dep, r.dir, strings.Join(r.never, " or ")))
			}
		}
	}
	return out
}

// directProblem says why a direct import breaks the rule ("" when it does not).
func (r rule) directProblem(imp string) string {
	switch {
	case slices.ContainsFunc(r.notDirect, func(p string) bool { return imp == p }):
		return fmt.Sprintf("%s must not import %s directly", r.dir, imp)
	case stdlib(imp), under(imp, full(r.dir)): // its own packages are fine
		return ""
	case underAny(imp, r.never):
		return fmt.Sprintf("%s must never import %s", r.dir, strings.Join(r.never, " or "))
	case r.only != nil && !underAny(imp, r.only):
		return fmt.Sprintf("%s may import %s", r.dir, r.allowed())
	case r.ours != nil && under(imp, module) && !underAny(imp, r.ours):
		return fmt.Sprintf("of this module, %s may import %s only", r.dir, strings.Join(r.ours, ", "))
	}
	return ""
}

// allowed describes r.only.
func (r rule) allowed() string {
	if len(r.only) == 0 {
		return "only the standard library"
	}
	return "only the standard library and " + strings.Join(r.only, ", ")
}

// stdlib reports whether path is in the standard library: its first element has no dot.
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// full turns a module-relative path of the rules into an import path.
func full(p string) string {
	if stdlib(p) {
		return module + "/" + p
	}
	return p
}

// under reports whether path is prefix or a package under it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func underAny(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if under(path, full(p)) {
			return true
		}
	}
	return false
}

// listPackages runs go list on the whole module (tests' imports are not included).
func listPackages(t *testing.T) []pkg {
	t.Helper()
	root := moduleRoot(t)
	// go test puts its own toolchain's bin directory first in PATH.
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,Error", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", root, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return under(p.ImportPath, module) }) {
		t.Fatalf("go list found no package of %s in %s", module, root)
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return dir
}
