package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/transport/presence"
)

// heapNow is the live heap after a collection.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// modelServer is a nats-server in this process configured as a fleet's (the
// fleet's operator, accounts and permissions: natsauth.Authority.Configure) but
// without TLS, so that thousands of in-process connections cost no handshakes.
func modelServer(t *testing.T, a *natsauth.Authority) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxConn: 1 << 20}
	if err := a.Configure(opts, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	opts.TLS, opts.TLSConfig = false, nil
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start() // owned by the test: Shutdown below
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("model NATS server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// plainCreds are c without the CA (the model server speaks no TLS).
func plainCreds(t *testing.T, a *natsauth.Authority, id natsauth.Identity) *natsauth.Creds {
	t.Helper()
	c, err := a.Issue(id)
	if err != nil {
		t.Fatal(err)
	}
	c.CA = nil
	return c
}

// nodeSubjects starts one real node agent on s and returns the subjects its
// connection subscribes to, with its name replaced by %s.
func nodeSubjects(t *testing.T, s *server.Server, a *natsauth.Authority) []string {
	t.Helper()
	conn, err := transport.Connect(context.Background(), transport.NATSConfig{URL: s.ClientURL(), Name: "probe-node",
		Creds: plainCreds(t, a, natsauth.Identity{Kind: natsauth.KindNode, Name: "probe"}), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	keys := testutil.NewTrust(t)
	n, err := node.New(node.Config{Name: "probe", DataDir: t.TempDir(), Bus: conn, Verifier: keys.NewVerifier(t), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := conn.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	cz, err := s.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, c := range cz.Conns {
		if c.Name == "probe-node" {
			for _, sub := range c.Subs {
				subs = append(subs, strings.ReplaceAll(sub, "probe", "%s"))
			}
		}
	}
	if len(subs) == 0 {
		t.Fatal("the probe node subscribes to nothing")
	}
	return subs
}

// TestScaleNATS measures what N node agents cost a NATS server configured as a
// fleet's: N connections, each authenticated with its own user JWT and
// subscribed to what a real node agent subscribes to (read from a real one), a
// request to a node's subject at N, and a controller's presence (the real
// transport/presence) finding every node: how long its connection list takes,
// and how big the list is.
func TestScaleNATS(t *testing.T) {
	scaleEnabled(t)
	for _, n := range sizesFrom(t, "FLEETMUX_SCALE_NATS", []int{1000, 10000}) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			a, err := natsauth.NewAuthority()
			if err != nil {
				t.Fatal(err)
			}
			s := modelServer(t, a)
			subjects := nodeSubjects(t, s, a)
			base := heapNow()
			subsBefore := s.NumSubscriptions()
			began := time.Now()
			conns := make([]*nats.Conn, n)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			var failed atomic.Int64
			for i := range n {
				sem <- struct{}{}
				wg.Add(1)
				go func() { // joined below
					defer wg.Done()
					defer func() { <-sem }()
					name := fmt.Sprintf("node-%05d", i)
					c := plainCreds(t, a, natsauth.Identity{Kind: natsauth.KindNode, Name: name})
					nc, err := nats.Connect("", nats.InProcessServer(s), nats.UserJWTAndSeed(c.JWT, string(c.Seed)),
						nats.CustomInboxPrefix(natsauth.Identity{Kind: natsauth.KindNode, Name: name}.Inbox()), nats.Name(name),
						nats.Timeout(30*time.Second), nats.FlusherTimeout(30*time.Second))
					if err != nil {
						failed.Add(1)
						return
					}
					conns[i] = nc
					for _, subj := range subjects {
						subj = strings.ReplaceAll(subj, "%s", name)
						if strings.HasSuffix(subj, ".list") { // answers, as the node's list verb does
							_, err = nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte(`{"sessions":[]}`)) })
						} else {
							_, err = nc.Subscribe(subj, func(*nats.Msg) {})
						}
						if err != nil {
							failed.Add(1)
						}
					}
					if err := nc.Flush(); err != nil {
						failed.Add(1)
					}
				}()
			}
			wg.Wait()
			t.Cleanup(func() {
				for _, nc := range conns {
					if nc != nil {
						nc.Close()
					}
				}
			})
			if failed.Load() > 0 {
				t.Fatalf("%d node connections or subscriptions failed", failed.Load())
			}
			connectTook := time.Since(began)
			perConn := float64(heapNow()-base) / float64(n)
			subs := s.NumSubscriptions() - subsBefore

			// A request to one node among N (the controller's path to a node).
			ctlCreds := plainCreds(t, a, natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
			ctl, err := transport.Connect(context.Background(), transport.NATSConfig{URL: s.ClientURL(), Creds: ctlCreds, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			var lat []time.Duration
			for i := range 200 {
				subj := fmt.Sprintf("fleetmux.rpc.node-%05d.list", (i*7919)%n)
				st := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := ctl.Request(ctx, subj, nil, []byte(`{}`))
				cancel()
				if err != nil {
					t.Fatalf("request %s: %v", subj, err)
				}
				lat = append(lat, time.Since(st))
			}
			// The connection list a controller's presence asks for.
			listBytes := connzBytes(t, ctl.NC())
			// Its warnings (a list that failed) go to the test's output.
			w := presence.New(ctl, presence.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			found := make(chan time.Duration, 1)
			pstart := time.Now()
			stop, err := w.Watch(func(connected map[string]bool, known bool) {
				if known && len(connected) >= n {
					select {
					case found <- time.Since(pstart):
					default:
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			presenceTook := "not within 60s"
			select {
			case d := <-found:
				presenceTook = d.Round(time.Millisecond).String()
			case <-time.After(60 * time.Second):
			}
			t.Logf("nodes | connect+subscribe all | subscriptions per node | server+client heap per node | request p50 / p99 | connection list (CONNZ, auth) | presence knows every node")
			t.Logf("| %d | %v | %d | %.0f KiB | %v / %v | %.1f MiB | %s |", n, connectTook.Round(time.Millisecond), int(subs)/n,
				perConn/1024, pct(lat, 50), pct(lat, 99), float64(listBytes)/(1<<20), presenceTook)
		})
	}
}

// pct is the p-th percentile of ds (which it sorts).
func pct(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)].Round(10 * time.Microsecond)
}

// connzBytes asks for the account's connection list as presence does and
// returns the size of the replies.
func connzBytes(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	inbox := nc.NewRespInbox()
	var total atomic.Int64
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) { total.Add(int64(len(m.Data))) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	body, _ := json.Marshal(map[string]any{"auth": true, "limit": 1 << 16})
	if err := nc.PublishRequest(natsauth.ConnzRequest, inbox, body); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() bool { return total.Load() > 0 }, "a connection list")
	t.Logf("the connection list's first reply came %v after the request", time.Since(start).Round(time.Millisecond))
	// One server: one reply. A moment more in case it comes in parts.
	time.Sleep(200 * time.Millisecond) // the reply is whole or not: nothing to wait on
	return int(total.Load())
}

// TestScaleController measures a controller's node table and fan-out at N nodes:
// the heap each node takes in the table (members with a node's gossip
// metadata, as gossip hands them over), GET /v1/nodes, and POST /v1/run to every
// node, the nodes answering from a stub (one NATS connection that answers every
// node's create, run and close as a node would, without a shell).
func TestScaleController(t *testing.T) {
	scaleEnabled(t)
	for _, n := range sizesFrom(t, "FLEETMUX_SCALE_CONTROLLER", []int{1000, 10000}) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			srv := testutil.StartNATS(t, t.TempDir())
			connect := func(name string) *transport.Conn {
				c, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL(), Name: name, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			stubs := 4
			for i := range stubs {
				c := connect(fmt.Sprintf("stub%d", i))
				if _, err := c.NC().QueueSubscribe("fleetmux.rpc.*.*", "stub", stubAnswer); err != nil {
					t.Fatal(err)
				}
			}
			keys := testutil.NewTrust(t)
			ctl, err := controller.New(controller.Config{Name: "ctl", Bus: connect("ctl"), Signer: keys.Signer, Token: benchToken, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := ctl.Start(); err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			h, err := httpapi.New(httpapi.Config{Listen: "127.0.0.1:0", Fleet: ctl, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Start(); err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			empty := heapNow()
			for i := range n {
				meta := gossipSample(i)
				ctl.Observe(controller.Member{Name: meta.Name, Addr: fmt.Sprintf("10.%d.%d.%d:7946", i>>16, (i>>8)&255, i&255), State: api.NodeAlive, Meta: meta})
			}
			perNode := float64(heapNow()-empty) / float64(n)
			st := &ctlStack{base: "http://" + h.Addr(), http: &http.Client{Timeout: 5 * time.Minute}}
			var nl api.NodeList
			lst := time.Now()
			if err := st.do("GET", "/v1/nodes", nil, &nl); err != nil {
				t.Fatal(err)
			}
			listTook := time.Since(lst)
			if len(nl.Nodes) != n {
				t.Fatalf("GET /v1/nodes lists %d nodes, want %d", len(nl.Nodes), n)
			}
			listJSON, _ := json.Marshal(nl)
			var out api.Fanout
			fst := time.Now()
			if err := st.do("POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{All: true}, Command: "true", TimeoutMS: 60000}, &out); err != nil {
				t.Fatal(err)
			}
			fanTook := time.Since(fst)
			if out.OK != n {
				first := ""
				for _, r := range out.Results {
					if r.Error != nil {
						first = r.Node + ": " + r.Error.Message
						break
					}
				}
				t.Fatalf("fan-out to %d nodes: %d ok, %d failed (first: %s)", n, out.OK, out.Failed, first)
			}
			fanJSON, _ := json.Marshal(out)
			t.Logf("nodes | table heap per node | GET /v1/nodes | its JSON | fan-out to all (create, run, close each) | its JSON")
			t.Logf("| %d | %.1f KiB | %v | %.1f MiB | %v | %.1f MiB |", n, perNode/1024, listTook.Round(time.Millisecond),
				float64(len(listJSON))/(1<<20), fanTook.Round(time.Millisecond), float64(len(fanJSON))/(1<<20))
		})
	}
}

// stubAnswer answers a node verb as a node whose every command prints "ok" and
// exits 0 would, from the subject alone (fleetmux.rpc.NODE.VERB).
func stubAnswer(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	node, verb := parts[2], parts[3]
	zero := 0
	var reply any
	switch verb {
	case "create", "close":
		reply = api.Session{ID: "s1", Node: node, State: api.StateIdle}
	case "run":
		reply = api.BlockResult{Block: api.Block{N: 1, State: api.BlockDone, ExitCode: &zero, Command: "true"}, Text: "ok\n",
			Session: api.Session{ID: "s1", Node: node, State: api.StateIdle}}
	default:
		reply = struct{}{}
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}
