package httpapi_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestSudoSecretThroughAPI: sudo without handing out the password, through the
// real API: an admin stores a secret with PUT /v1/nodes/{node}/secrets/{name}, the
// policy (PUT /v1/policy) lets operators use it, and an operator's `sudo -k; sudo
// id -u` as a user who must type their password prints 0. The secret's bytes are
// in no reply, no message on NATS (but the request that stores it) and not in the
// controller's audit log; GET lists its name only; viewers and operators may not
// touch secrets.
func TestSudoSecretThroughAPI(t *testing.T) {
	var b [12]byte
	rand.Read(b[:])
	secret := "Fm-" + hex.EncodeToString(b[:])
	user := testutil.SudoUser(t, secret)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true, Policy: true,
		Config: func(c *controller.Config) { c.AuditFile = auditFile }})
	var mu sync.Mutex
	var published bytes.Buffer
	nc, err := nats.Connect(f.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(api.DefaultPrefix+".>", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Subject, api.DefaultPrefix+".rpc.") { // requests: secret_set carries it to the node
			mu.Lock()
			published.Write(m.Data)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	var replies bytes.Buffer
	do := func(want int, method, path string, body any) []byte {
		t.Helper()
		code, b := f.Do(method, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
		}
		replies.Write(b)
		return b
	}

	f.setPolicyEverywhere(t, "version: 1\nsecrets:\n  - {name: sudo-test, roles: [operator]}\n")
	do(200, "PUT", "/v1/nodes/n1/secrets/sudo-test", api.SecretBody{Value: secret})
	var list api.SecretList
	json.Unmarshal(do(200, "GET", "/v1/nodes/n1/secrets", nil), &list)
	if len(list.Secrets) != 1 || list.Secrets[0].Name != "sudo-test" {
		t.Fatalf("GET secrets: %+v", list)
	}
	do(400, "PUT", "/v1/nodes/n1/secrets/bad.name", api.SecretBody{Value: secret})
	do(404, "PUT", "/v1/nodes/nope/secrets/sudo-test", api.SecretBody{Value: secret})

	// An operator's token: runs, may not touch secrets.
	var nt api.NewToken
	f.Must(200, "POST", "/v1/tokens", api.TokenRequest{Name: "agent", Role: api.RoleOperator}, &nt)
	admin := f.Token
	f.Token = nt.Secret
	do(403, "GET", "/v1/nodes/n1/secrets", nil)
	do(403, "PUT", "/v1/nodes/n1/secrets/sudo-test", api.SecretBody{Value: "x"})
	var s api.Session
	json.Unmarshal(do(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Shell: "bash", User: user}}), &s)
	do(200, "GET", "/v1/sessions/n1/"+s.ID+"/wait?until=idle&timeout_ms=10000", nil)
	var res api.BlockResult
	json.Unmarshal(do(200, "POST", "/v1/sessions/n1/"+s.ID+"/run", api.RunBody{Command: "sudo -k; sudo id -u", TimeoutMS: 20000}), &res)
	lines := strings.Split(strings.TrimSpace(res.Text), "\n")
	if res.Block.ExitCode == nil || *res.Block.ExitCode != 0 || lines[len(lines)-1] != "0" {
		t.Fatalf("sudo id -u: %q %+v", res.Text, res.Block)
	}
	do(200, "GET", "/v1/sessions/n1/"+s.ID+"/screen", nil)
	do(200, "GET", "/v1/sessions/n1/"+s.ID+"/output?from=0", nil)
	do(200, "GET", "/v1/sessions/n1/"+s.ID+"/blocks/1", nil)
	f.Token = admin
	do(200, "DELETE", "/v1/nodes/n1/secrets/sudo-test", nil)
	do(200, "DELETE", "/v1/sessions/n1/"+s.ID, nil)

	testutil.Eventually(t, 10*time.Second, func() bool {
		b, _ := os.ReadFile(auditFile)
		return bytes.Contains(b, []byte("DELETE /v1/nodes/{node}/secrets/{name}"))
	}, "the controller's audit of the secret's removal")
	logged, _ := os.ReadFile(auditFile)
	mu.Lock()
	pub := bytes.Clone(published.Bytes())
	mu.Unlock()
	if !bytes.Contains(pub, []byte("password for "+user)) || !bytes.Contains(logged, []byte("PUT /v1/nodes/{node}/secrets/{name}")) {
		t.Fatal("the stream misses sudo's prompt, or the audit log the secret's PUT: the search below would prove nothing")
	}
	for what, b := range map[string][]byte{"a reply": replies.Bytes(), "a NATS message": pub, "the audit log": logged} {
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(secret[3:])) {
			t.Errorf("the secret is in %s", what)
		}
	}
	if !bytes.Contains(pub, []byte(`"action":"secret"`)) {
		t.Error("no audit record of the secret typed")
	}
}
