package layout

import (
	"strings"
	"testing"
)

func ruleFor(t *testing.T, dir string) rule {
	t.Helper()
	for _, r := range rules {
		if r.dir == dir {
			return r
		}
	}
	t.Fatalf("no rule for %s", dir)
	return rule{}
}

// TestCheckCatchesViolations proves the checker fails on broken rules, with fake
// import lists.
func TestCheckCatchesViolations(t *testing.T) {
	m := module + "/"
	tests := []struct {
		dir  string
		p    pkg
		want []string // one substring per expected violation; none: clean
	}{
		{"api", pkg{ImportPath: m + "api", Imports: []string{"fmt", "strings"}, Deps: []string{"fmt", "strings", "vendor/golang.org/x/net/dns/dnsmessage"}}, nil},
		{"api", pkg{ImportPath: m + "api", Imports: []string{"fmt", "github.com/google/uuid"}, Deps: []string{"fmt", "github.com/google/uuid"}},
			[]string{"api imports github.com/google/uuid: api may import only the standard library ("}},
		{"api", pkg{ImportPath: m + "api", Imports: []string{"fmt", m + "session"}, Deps: []string{"fmt", m + "session", "github.com/creack/pty"}},
			[]string{"api imports " + m + "session", "api depends on github.com/creack/pty"}},
		{"api", pkg{ImportPath: m + "api", Imports: []string{"fmt"}, Deps: []string{"fmt", "golang.org/x/text/unicode/norm"}},
			[]string{"api depends on golang.org/x/text/unicode/norm: api may depend on only the standard library"}},
		{"api", pkg{ImportPath: m + "api/sub", Imports: []string{"golang.org/x/sys/unix"}},
			[]string{"api/sub imports golang.org/x/sys/unix"}},
		{"session", pkg{ImportPath: m + "session", Imports: []string{"os", "github.com/creack/pty", "golang.org/x/sys/unix", "golang.org/x/term", "github.com/charmbracelet/x/vt"},
			Deps: []string{"github.com/charmbracelet/x/ansi", "github.com/rivo/uniseg"}}, nil},
		{"session", pkg{ImportPath: m + "session", Imports: []string{"github.com/charmbracelet/x/ansi", m + "api", m + "replay"}},
			[]string{"imports github.com/charmbracelet/x/ansi", "imports " + m + "replay"}},
		{"replay", pkg{ImportPath: m + "replay", Imports: []string{"io", m + "api"}}, nil},
		{"replay", pkg{ImportPath: m + "replay/player", Imports: []string{m + "replay"}, Deps: []string{m + "replay", m + "api"}}, nil},
		{"api", pkg{ImportPath: m + "api/wire", Imports: []string{m + "api"}, Deps: []string{m + "api"}}, nil},
		{"replay", pkg{ImportPath: m + "replay", Imports: []string{m + "session"}}, []string{"replay imports " + m + "session: replay may import only the standard library and api ("}},
		{"node", pkg{ImportPath: m + "node", Imports: []string{m + "api", m + "session", m + "replay", "github.com/nats-io/nats.go/micro"}}, nil},
		{"node", pkg{ImportPath: m + "node", Imports: []string{m + "transport"}, Deps: []string{m + "transport"}},
			[]string{"node imports " + m + "transport: node must never import controller or transport"}},
		{"node", pkg{ImportPath: m + "node", Imports: []string{m + "replay"}, Deps: []string{m + "replay", m + "controller/http"}},
			[]string{"node depends on " + m + "controller/http: node must never import controller or transport"}},
		{"node", pkg{ImportPath: m + "node", Imports: []string{m + "client"}}, []string{"of this module, node may import api, agent, session, holder, replay, guard, trust, policy, proc, keeper, internal/datadir, internal/delay, internal/reclaim, internal/sandbox, tracing only"}},
		{"controller", pkg{ImportPath: m + "controller/ssh", Imports: []string{m + "node"}, Deps: []string{m + "node"}},
			[]string{"controller/ssh imports " + m + "node: controller must never import node or transport"}},
		{"controller", pkg{ImportPath: m + "controller", Imports: []string{m + "replay"}, Deps: []string{m + "replay", m + "transport/nats"}},
			[]string{"controller depends on " + m + "transport/nats: controller must never import"}},
		{"controller", pkg{ImportPath: m + "controller", Imports: []string{m + "session"}}, []string{"controller may import api, digest, replay, trust, policy, internal/datadir, internal/delay, tracing only"}},
		{"controller", pkg{ImportPath: m + "controller", Imports: []string{m + "api", "github.com/prometheus/client_golang/prometheus"}, Deps: []string{"net/http"}}, nil},
		{"controller", pkg{ImportPath: m + "controller", Imports: []string{m + "api", "net/http"}}, []string{"controller imports net/http: controller must not import net/http directly"}},
		{"controller", pkg{ImportPath: m + "controller", Imports: []string{m + "mcpserver"}, Deps: []string{m + "mcpserver"}},
			[]string{"controller imports " + m + "mcpserver: controller must never import"}},
		{"httpapi", pkg{ImportPath: m + "httpapi", Imports: []string{"net/http", m + "api", m + "internal/netcap", "github.com/prometheus/client_golang/prometheus/promhttp"}}, nil},
		{"httpapi", pkg{ImportPath: m + "httpapi", Imports: []string{m + "controller"}, Deps: []string{m + "controller"}},
			[]string{"httpapi imports " + m + "controller: httpapi must never import"}},
		{"mcpserver", pkg{ImportPath: m + "mcpserver", Imports: []string{"net/http", m + "api", "github.com/modelcontextprotocol/go-sdk/mcp", "github.com/google/jsonschema-go/jsonschema"},
			Deps: []string{"github.com/yosida95/uritemplate/v3", "golang.org/x/oauth2"}}, nil},
		{"mcpserver", pkg{ImportPath: m + "mcpserver", Imports: []string{m + "controller"}, Deps: []string{m + "controller"}},
			[]string{"mcpserver imports " + m + "controller: mcpserver must never import controller or node or transport"}},
		{"mcpserver", pkg{ImportPath: m + "mcpserver", Imports: []string{m + "client"}, Deps: []string{m + "client", m + "node"}},
			[]string{"mcpserver imports " + m + "client: mcpserver may import only the standard library and api, tracing, github.com/modelcontextprotocol/go-sdk", "mcpserver depends on " + m + "node: mcpserver must never import"}},
		{"sshd", pkg{ImportPath: m + "sshd", Imports: []string{"net", m + "api", m + "internal/datadir", "golang.org/x/crypto/ssh"},
			Deps: []string{"golang.org/x/crypto/ssh", "golang.org/x/crypto/curve25519", "golang.org/x/sys/cpu"}}, nil},
		{"sshd", pkg{ImportPath: m + "sshd", Imports: []string{m + "controller"}, Deps: []string{m + "controller", m + "transport"}},
			[]string{"sshd imports " + m + "controller: sshd must never import controller or node or transport", "sshd depends on " + m + "transport: sshd must never import"}},
		{"sshd", pkg{ImportPath: m + "sshd", Imports: []string{m + "trust", "github.com/gliderlabs/ssh"}},
			[]string{"sshd imports " + m + "trust: sshd may import only the standard library and api, internal/datadir, golang.org/x/crypto",
				"sshd imports github.com/gliderlabs/ssh: sshd may import only"}},
		{"client", pkg{ImportPath: m + "client", Imports: []string{"net/http", m + "api"}}, nil},
		{"guard", pkg{ImportPath: m + "guard", Imports: []string{m + "api", m + "policy", m + "internal/datadir"}}, nil},
		{"guard", pkg{ImportPath: m + "guard", Imports: []string{m + "session"}, Deps: []string{m + "session"}},
			[]string{"guard imports " + m + "session: guard must never import session or node or controller or transport"}},
		{"policy", pkg{ImportPath: m + "policy", Imports: []string{"regexp", m + "api", "go.yaml.in/yaml/v3"}}, nil},
		{"policy", pkg{ImportPath: m + "policy", Imports: []string{"gopkg.in/yaml.v3", m + "trust"}},
			[]string{"policy imports gopkg.in/yaml.v3: policy may import only the standard library and api, go.yaml.in/yaml/v3", "policy imports " + m + "trust"}},
		{"internal/delay", pkg{ImportPath: m + "internal/delay", Imports: []string{"sync", m + "api"}}, nil},
		{"internal/delay", pkg{ImportPath: m + "internal/delay", Imports: []string{"sync", m + "session"}}, []string{"internal/delay imports " + m + "session"}},
		{"client", pkg{ImportPath: m + "client", Imports: []string{"golang.org/x/net/websocket"}}, []string{"client imports golang.org/x/net/websocket"}},
	}
	for _, tt := range tests {
		got := ruleFor(t, tt.dir).check([]pkg{tt.p})
		if len(got) != len(tt.want) {
			t.Errorf("%s: check(%v) = %q, want %d violations like %q", tt.dir, tt.p, got, len(tt.want), tt.want)
			continue
		}
		for i, w := range tt.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: violation %d = %q, want it to contain %q", tt.dir, i, got[i], w)
			}
		}
	}
}

func TestStdlib(t *testing.T) {
	for path, want := range map[string]bool{
		"fmt": true, "net/http": true, "C": true, "vendor/golang.org/x/crypto/cryptobyte": true,
		"github.com/creack/pty": false, "golang.org/x/sys/unix": false, module + "/api": false,
	} {
		if got := stdlib(path); got != want {
			t.Errorf("stdlib(%q) = %v, want %v", path, got, want)
		}
	}
}
