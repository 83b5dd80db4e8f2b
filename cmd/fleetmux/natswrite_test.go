package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// TestSubscriberCannotRevokeTokens performs a subscriber's attack on the API
// tokens on `fleetmux dev`: with subscriber.creds it sends requests whose reply
// subject is a token's key in the FLEETMUX_TOKENS bucket, so that what answers
// them publishes there: a controller answering a consumer request
// (fleetmux.consumer.…), and the JetStream API answering a stream info. Both
// answers were stored as the token's record, which the controllers could not
// read, so they dropped the token: any subscriber revoked any API token, the
// admin's too. Now a controller answers only into the asker's inbox, and a
// record no controller wrote revokes nothing.
func TestSubscriberCannotRevokeTokens(t *testing.T) {
	addr := startDev(t)
	out, errs, err := runArgs(t, "token", "create", "--addr", addr, "--name", "victim", "--role", "operator")
	if err != nil {
		t.Fatalf("token create: %v %s", err, errs)
	}
	victim := strings.TrimSpace(out)
	works := func() bool {
		req, _ := http.NewRequest("GET", addr+"/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+victim)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if !works() {
		t.Fatal("the new token is refused")
	}
	nb, err := os.ReadFile(filepath.Join("data", "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	connect := func(kind string) *nats.Conn {
		creds := filepath.Join("data", "creds", kind+".creds")
		nc, err := nats.Connect(strings.TrimSpace(string(nb)), nats.UserCredentials(creds), nats.RootCAs(creds),
			nats.CustomInboxPrefix("_INBOX."+kind+"."+map[string]string{"subscriber": "subscriber", "controller": "controller-here"}[kind]))
		if err != nil {
			t.Fatalf("connect with %s.creds: %v", kind, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	const key = "$KV.FLEETMUX_TOKENS.victim"
	// What reaches the token's key, as the stream stores it.
	watch := connect("controller")
	seen, err := watch.SubscribeSync(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	sub := connect("subscriber")
	for _, subj := range []string{
		"fleetmux.consumer.FLEETMUX_OUT.subscriber.fleetmux.out.here.>", // a controller answers
		"$JS.API.STREAM.INFO.FLEETMUX_OUT",                              // the server answers
	} {
		if err := sub.PublishRequest(subj, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	// The server's answer lands on the key whatever fleetmux does: wait for it,
	// so that the token is checked after the controller's watch had it.
	deadline := time.Now().Add(10 * time.Second)
	for got := false; !got; {
		m, err := seen.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("the server's answer never reached %s: %v", key, err)
		}
		var probe struct{ Type string }
		_ = json.Unmarshal(m.Data, &probe)
		got = strings.Contains(probe.Type, "stream_info_response")
	}
	// The watch applies it within milliseconds: the token must stay good for
	// well beyond that.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if !works() {
			t.Fatal("a subscriber's requests revoked an API token")
		}
	}
}

// TestDevConfigKeptFromSessions performs a session program's attack on
// `fleetmux dev`'s admin token: the data dir is hidden from sessions, but the
// same token sits in $XDG_CONFIG_HOME/fleetmux/dev.json, which a session
// (an agent under a policy that holds its commands for a person, say) read to
// act as the admin. Now that directory is hidden as the data dir is.
func TestDevConfigKeptFromSessions(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root (sessions are kept out of the data dir by mounts)")
	}
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	cfg, err := client.DevConfigPath()
	if err != nil {
		t.Fatal(err)
	}
	out, errs, _ := runArgs(t, "run", "--addr", addr, "here/s1", "--", "cat "+cfg+"; cat "+filepath.Join(wd(t), "data", "token")+"; echo done")
	if !strings.Contains(out, "done") {
		t.Fatalf("run: %q %q", out, errs)
	}
	if strings.Contains(out, devAdminToken) || strings.Contains(out, "fmx1.") {
		t.Fatalf("a session read dev's admin token: %q", out)
	}
}

func wd(t *testing.T) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
