package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
)

// nodeEnv is a node agent on an embedded NATS server with one bash session (s1), and a
// client connection.
type nodeEnv struct {
	srv    *transport.Server
	client *transport.Conn
	subj   api.Subjects
	trust  *testutil.Trust
	b      *testing.B
}

func startNode(b *testing.B, e benchEnv) *nodeEnv {
	b.Helper()
	b.Setenv("HOME", e.home)
	srv := testutil.StartNATS(b, b.TempDir())
	ctx := context.Background()
	bus, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bus.Close() })
	tr := testutil.NewTrust(b)
	n, err := node.New(node.Config{Name: "bench", DataDir: b.TempDir(), Bus: bus, Verifier: tr.Verifier, ScrollbackBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	client, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	ne := &nodeEnv{srv: srv, client: client, trust: tr, b: b}
	if _, err := ne.call("create", api.CreateRequest{Cwd: e.dir}); err != nil {
		b.Fatal(err)
	}
	if err := ne.run("true"); err != nil {
		b.Fatal(err)
	}
	return ne
}

func (ne *nodeEnv) call(verb string, req any) ([]byte, error) {
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), throughputTimeout)
	defer cancel()
	subject := ne.subj.RPC("bench", verb)
	reply, err := ne.client.Request(ctx, subject, ne.trust.Header(ne.b, subject, data, "bench", api.RoleAdmin), data)
	if err != nil {
		return nil, err
	}
	return reply, nil
}

func (ne *nodeEnv) run(cmd string) error {
	reply, err := ne.call("run", api.RunRequest{Session: "s1", Command: cmd, TimeoutMS: int(throughputTimeout / time.Millisecond)})
	if err != nil {
		return err
	}
	var r api.BlockResult
	if err := json.Unmarshal(reply, &r); err != nil || r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		return fmt.Errorf("node run %q: %s", cmd, reply)
	}
	return nil
}

// BenchmarkNodeRoundTrip: `run` of `true` over NATS (request → node → session.Run →
// reply) next to session.Run called directly.
func BenchmarkNodeRoundTrip(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("session", func(b *testing.B) {
		s := startSession(b, e)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if _, err := sessionRun(s, "true", opTimeout); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportLatency(b, lat)
	})
	b.Run("nats", func(b *testing.B) {
		ne := startNode(b, e)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if err := ne.run("true"); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportLatency(b, lat)
	})
}

// BenchmarkNodeThroughput: the payload from the PTY to a NATS subscriber of
// fleetmux.out.bench.> (timed until the subscriber has every byte), next to a raw PTY.
func BenchmarkNodeThroughput(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("nats-subscriber", func(b *testing.B) {
		ne := startNode(b, e)
		sub, err := nats.Connect(ne.srv.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		var got atomic.Int64
		s, err := sub.Subscribe(ne.subj.All(api.KindOut, "bench"), func(m *nats.Msg) {
			off, _ := strconv.ParseInt(m.Header.Get(api.HeaderOffset), 10, 64)
			got.Store(off + int64(len(m.Data)))
		})
		if err != nil {
			b.Fatal(err)
		}
		s.SetPendingLimits(-1, -1)
		sub.Flush()
		b.SetBytes(payloadBytes)
		for b.Loop() {
			// Submit without waiting for the block (its reply would render 32 MB of
			// text); time until the subscriber holds the whole payload.
			reply, err := ne.call("run", api.RunRequest{Session: "s1", Command: payloadCmd, TimeoutMS: 1})
			var r api.BlockResult
			if err != nil || json.Unmarshal(reply, &r) != nil {
				b.Fatalf("run: %v %s", err, reply)
			}
			want := r.Block.Start + payloadBytes // plus a CR per line on the wire
			deadline := time.Now().Add(throughputTimeout)
			for got.Load() < want {
				if time.Now().After(deadline) {
					b.Fatalf("subscriber at %d, want %d", got.Load(), want)
				}
				time.Sleep(time.Millisecond) // polling an atomic: the measured wait
			}
			b.StopTimer()
			if _, err := ne.call("wait", api.WaitRequest{Session: "s1", Until: "idle", TimeoutMS: 60000}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("rawpty", func(b *testing.B) {
		r, err := startRawPTY(e)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.SetBytes(payloadBytes)
		for b.Loop() {
			if _, err := r.throughput(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func reportLatency(b *testing.B, ds []time.Duration) {
	b.ReportMetric(micros(percentile(ds, 50)), "p50-µs")
	b.ReportMetric(micros(percentile(ds, 99)), "p99-µs")
}
