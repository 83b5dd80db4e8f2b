package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestBlocksNeverLie drives bash and zsh through the API: lines the shell rejects end
// with the shell's own $?, replaced prompt hooks do not take the exit codes away, and
// a block without a code says why.
func TestBlocksNeverLie(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			testutil.NeedTool(t, shell)
			var s api.Session
			f.Must(http.StatusCreated, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Shell: shell}}, &s)
			path := "/v1/sessions/" + s.Node + "/" + s.ID
			var w api.WaitResult
			f.Must(200, "GET", path+"/wait?until=idle&timeout_ms=10000", nil, &w)
			if w.Session.Integration != api.IntegrationOK {
				t.Fatalf("integration %q, want ok", w.Session.Integration)
			}
			code := func(br api.BlockResult) string {
				if br.Block.ExitCode == nil {
					return "none (" + br.Block.ExitCodeNote + ")"
				}
				return fmt.Sprint(*br.Block.ExitCode)
			}
			expect := func(cmd, want string) {
				t.Helper()
				br := f.Run(s.Node, s.ID, cmd)
				if br.Block.State != api.BlockDone || code(br) != want {
					t.Fatalf("%q: state %s code %s, want %s; text %q", cmd, br.Block.State, code(br), want, br.Text)
				}
			}
			expect("true", "0")
			expect("fi", map[string]string{"bash": "2", "zsh": "1"}[shell])

			// An incomplete line, then Ctrl-C: the shell's 130.
			var br api.BlockResult
			f.Must(200, "POST", path+"/run", api.RunBody{Command: "if true; then", TimeoutMS: 50}, &br)
			f.Must(200, "GET", path+"/wait?until=waiting_input&timeout_ms=10000", nil, &w)
			f.Must(200, "POST", path+"/keys", api.KeysBody{Keys: []string{"C-c"}}, nil)
			f.Must(200, "GET", path+"/wait?until=idle&timeout_ms=10000", nil, &w)
			f.Must(200, "GET", fmt.Sprintf("%s/blocks/%d", path, br.Block.N), nil, &br)
			if code(br) != "130" {
				t.Fatalf("if true; then + C-c: %s", code(br))
			}

			replace := map[string]string{"bash": "PROMPT_COMMAND='true'; PS1='$ '; PS0=''", "zsh": "precmd_functions=(); preexec_functions=(); PROMPT='%% '"}[shell]
			expect(replace, "0")
			expect("(exit 9)", "9")

			// A nested shell without integration: the code is unknown, and said so.
			f.Must(200, "POST", path+"/run", api.RunBody{Command: "bash --norc --noprofile", TimeoutMS: 50}, &br)
			f.Must(200, "GET", path+"/wait?until=waiting_input&timeout_ms=10000", nil, &w)
			nb := f.Run(s.Node, s.ID, "(exit 3)")
			if nb.Block.ExitCode != nil || nb.Block.ExitCodeNote != api.NoteFallback {
				t.Fatalf("nested: code %s, want none with the fallback note", code(nb))
			}
			expect("exit 4", "none ("+api.NoteFallback+")")
			f.Must(200, "GET", path+"/wait?until=idle&timeout_ms=10000", nil, &w)
			f.Must(200, "GET", fmt.Sprintf("%s/blocks/%d", path, br.Block.N), nil, &br)
			if code(br) != "4" {
				t.Fatalf("the nested shell's block: %s, want its exit status 4", code(br))
			}
		})
	}
}
