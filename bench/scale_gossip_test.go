package bench

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fleetmux/fleetmux/api"
)

// The scale model (docs/scale.md): what a fleet of 1,000 or 10,000 nodes costs
// its gossip, its NATS server and its controller, measured with the real parts in
// one process. FLEETMUX_SCALE=1 runs it (it takes minutes and gigabytes);
// FLEETMUX_SCALE_GOSSIP=250,1000 sets the memberlist cluster sizes.

// dilation is how many times slower time runs in the gossip model
// (FLEETMUX_SCALE_DILATION, default 10).
var dilation = func() int {
	if n, err := strconv.Atoi(os.Getenv("FLEETMUX_SCALE_DILATION")); err == nil && n >= 1 {
		return n
	}
	return 10
}()

// undilate converts a duration of the dilated model into the fleet's time.
func undilate(d time.Duration) time.Duration { return d / time.Duration(dilation) }

// scaleConverge bounds the wait for a cluster to converge at start.
var scaleConverge = 15 * time.Minute

// scaleEnabled skips the scale model unless FLEETMUX_SCALE=1.
func scaleEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("FLEETMUX_SCALE") != "1" {
		t.Skip("the scale model runs with FLEETMUX_SCALE=1 (minutes, gigabytes; see docs/scale.md)")
	}
}

// sizesFrom parses a comma-separated list of sizes from env, or returns def.
func sizesFrom(t *testing.T, env string, def []int) []int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("%s=%q: want sizes ≥ 2, comma-separated", env, v)
		}
		out = append(out, n)
	}
	return out
}

// memNet is an in-memory network for memberlist: packets are dropped when a
// receiver's queue is full or either end is down (UDP), streams are pipes, and
// every byte sent is counted. It stands in for the sockets so that a thousand
// members fit in one process; the members are memberlist itself, configured as
// transport/gossip configures it beyond loopback.
type memNet struct {
	mu     sync.RWMutex
	byAddr map[string]*memTransport
	next   int
	sent   atomic.Int64 // bytes, packets and streams
}

type memTransport struct {
	net     *memNet
	port    int
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	down    atomic.Bool
}

func (n *memNet) newTransport() *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byAddr == nil {
		n.byAddr = map[string]*memTransport{}
	}
	n.next++
	port := 1024 + n.next
	t := &memTransport{net: n, port: port, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		packets: make(chan *memberlist.Packet, 4096), streams: make(chan net.Conn, 64)}
	n.byAddr[t.addr] = t
	return t
}

func (n *memNet) peer(addr string) *memTransport {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.byAddr[addr]
}

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), t.port, nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	dest := t.net.peer(addr)
	if dest == nil || t.down.Load() || dest.down.Load() {
		return now, nil // lost, as a datagram to a dead host is
	}
	t.net.sent.Add(int64(len(b)))
	select {
	case dest.packets <- &memberlist.Packet{Buf: append([]byte(nil), b...), From: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: t.port}, Timestamp: now}:
	default: // the receiver's queue is full: dropped
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *memTransport) StreamCh() <-chan net.Conn           { return t.streams }
func (t *memTransport) Shutdown() error                     { return nil }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	dest := t.net.peer(addr)
	if dest == nil || t.down.Load() || dest.down.Load() {
		return nil, errors.New("connection refused")
	}
	a, b := net.Pipe()
	select {
	case dest.streams <- countedConn{Conn: a, sent: &t.net.sent}:
	case <-time.After(timeout):
		a.Close()
		b.Close()
		return nil, errors.New("dial timeout")
	}
	return countedConn{Conn: b, sent: &t.net.sent}, nil
}

// countedConn counts the bytes written to a stream.
type countedConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

// gossipMember is one memberlist member with a node's metadata.
type gossipMember struct {
	idx  int
	ml   *memberlist.Memberlist
	tr   *memTransport
	mu   sync.Mutex
	meta api.NodeMeta
	rec  *eventRecorder
}

func (g *gossipMember) NodeMeta(limit int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := json.Marshal(g.meta)
	return b
}
func (g *gossipMember) NotifyMsg([]byte)                           {}
func (g *gossipMember) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *gossipMember) LocalState(join bool) []byte                { return nil }
func (g *gossipMember) MergeRemoteState(buf []byte, join bool)     {}
func (g *gossipMember) NotifyJoin(n *memberlist.Node)              { g.rec.note("join", g.idx, n.Name) }
func (g *gossipMember) NotifyLeave(n *memberlist.Node)             { g.rec.note("leave", g.idx, n.Name) }
func (g *gossipMember) NotifyUpdate(n *memberlist.Node)            { g.rec.note("update", g.idx, n.Name) }

// eventRecorder times how long an event about one member takes to reach every
// other member.
type eventRecorder struct {
	mu     sync.Mutex
	kind   string
	target string
	start  time.Time
	want   int
	seen   map[int]bool
	done   chan time.Duration
}

// expect starts timing event kind about target, to be seen by want members.
func (r *eventRecorder) expect(kind, target string, want int) <-chan time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kind, r.target, r.want, r.start = kind, target, want, time.Now()
	r.seen = map[int]bool{}
	r.done = make(chan time.Duration, 1)
	return r.done
}

// count is how many members saw the event timed now.
func (r *eventRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// elapsed is the time since the event timed now began.
func (r *eventRecorder) elapsed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.start)
}

func (r *eventRecorder) note(kind string, by int, about string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil || kind != r.kind || about != r.target || r.seen[by] {
		return
	}
	r.seen[by] = true
	if len(r.seen) == r.want {
		r.done <- time.Since(r.start)
		r.done = nil
	}
}

// gossipSample is one member's metadata as a node gossips it (api.NodeMeta JSON).
func gossipSample(i int) api.NodeMeta {
	return api.NodeMeta{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{"role": "web", "zone": "eu-west-1b"},
		Version: "v1.4.2", Sessions: 3, Proto: api.ProtocolVersion, Published: 123456789, Sandbox: "landlock=7 netns cgroup=1"}
}

func startMember(t *testing.T, mn *memNet, key []byte, rec *eventRecorder, i int) *gossipMember {
	t.Helper()
	g := &gossipMember{idx: i, tr: mn.newTransport(), meta: gossipSample(i), rec: rec}
	cfg := memberlist.DefaultLANConfig() // transport/gossip beyond loopback
	// Time runs dilation times slower in the model (every interval and timeout
	// stretched alike, so the protocol takes the same rounds), so that a thousand
	// members' timers fit in a few cores; durations are divided back.
	for _, d := range []*time.Duration{&cfg.ProbeInterval, &cfg.ProbeTimeout, &cfg.GossipInterval, &cfg.PushPullInterval,
		&cfg.TCPTimeout, &cfg.GossipToTheDeadTime} {
		*d *= time.Duration(dilation)
	}
	cfg.Name = g.meta.Name
	cfg.Transport = g.tr
	cfg.SecretKey = key // nil in the model: see TestScaleGossip
	cfg.Delegate = g
	cfg.Events = g
	cfg.DeadNodeReclaimTime = 30 * time.Second * time.Duration(dilation)
	cfg.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.ml = ml
	return g
}

// TestScaleGossip measures a memberlist cluster of N members in one process:
// the time until every member knows of a new member, of a member's new metadata
// (a node's session count changing) and of a member's death, the bytes a member
// sends per second at rest, and the heap each member's view of the cluster takes.
func TestScaleGossip(t *testing.T) {
	scaleEnabled(t)
	// Gossip is encrypted in a fleet (AES-GCM: 29 bytes more per packet, and
	// CPU the model spends on a thousand members at once instead of one):
	// FLEETMUX_SCALE_ENCRYPT=1 turns it on here too.
	var key []byte
	if os.Getenv("FLEETMUX_SCALE_ENCRYPT") == "1" {
		key = make([]byte, 32)
		rand.Read(key)
	}
	for _, n := range sizesFrom(t, "FLEETMUX_SCALE_GOSSIP", []int{250, 1000}) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			mn := &memNet{}
			rec := &eventRecorder{}
			members := make([]*gossipMember, 0, n+1)
			defer func() {
				for _, g := range members {
					g.ml.Shutdown()
				}
			}()
			began := time.Now()
			members = append(members, startMember(t, mn, key, rec, 0))
			// Join in waves, each member through a random earlier one, as nodes
			// started by a fleet's rollout would.
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i := 1; i < n; i++ {
				g := startMember(t, mn, key, rec, i)
				seed := members[mrand.IntN(len(members))]
				members = append(members, g)
				sem <- struct{}{}
				wg.Add(1)
				go func() { // joined below
					defer wg.Done()
					defer func() { <-sem }()
					if _, err := g.ml.Join([]string{seed.tr.addr}); err != nil {
						t.Errorf("join %d: %v", g.idx, err)
					}
				}()
			}
			wg.Wait()
			// Converged: every member knows at least 99% of the others (on a
			// loaded machine a starved member is suspected now and then, and
			// refutes it).
			converged := func() bool {
				for _, g := range members {
					if g.ml.NumMembers() < len(members)-len(members)/100 {
						return false
					}
				}
				return true
			}
			lastLog := time.Now()
			for deadline := time.Now().Add(scaleConverge); !converged(); {
				if time.Since(lastLog) > time.Minute {
					lastLog = time.Now()
					least := len(members)
					for _, g := range members {
						least = min(least, g.ml.NumMembers())
					}
					t.Logf("after %v: every member knows at least %d of %d", time.Since(began).Round(time.Second), least, len(members))
				}
				if time.Now().After(deadline) {
					var counts []int
					for _, g := range members[:min(len(members), 20)] {
						counts = append(counts, g.ml.NumMembers())
					}
					t.Fatalf("%d members did not converge within 5 minutes: the first ones know %v", n, counts)
				}
				time.Sleep(200 * time.Millisecond) // polling with a deadline
			}
			startup := time.Since(began)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			perMember := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)

			// At rest: bytes sent per member per second.
			rest := 3 * time.Second * time.Duration(dilation)
			s0 := mn.sent.Load()
			time.Sleep(rest) // the measurement window
			restRate := float64(mn.sent.Load()-s0) / undilate(rest).Seconds() / float64(n)

			wait := func(what string, ch <-chan time.Duration) string {
				select {
				case d := <-ch:
					return undilate(d).Round(time.Millisecond).String()
				case <-time.After(3 * time.Minute * time.Duration(dilation)):
					return fmt.Sprintf("%d of %d members in 3m", rec.count(), n)
				}
			}
			// A join: member n, through one seed.
			newcomer := startMember(t, mn, key, rec, n)
			members = append(members, newcomer)
			ch := rec.expect("join", newcomer.meta.Name, n)
			s1 := mn.sent.Load()
			if _, err := newcomer.ml.Join([]string{members[1].tr.addr}); err != nil {
				t.Fatal(err)
			}
			joinTook := wait("a join", ch)
			joinBytes, joinTime := mn.sent.Load()-s1, rec.elapsed()

			// New metadata: a node's session count changes.
			g := members[n/2]
			ch = rec.expect("update", g.meta.Name, n)
			s2 := mn.sent.Load()
			g.mu.Lock()
			g.meta.Sessions++
			g.mu.Unlock()
			// UpdateNode waits until its broadcast has been sent as often as it
			// will be; the time it takes to reach everyone is what is measured.
			if err := g.ml.UpdateNode(time.Minute * time.Duration(dilation)); err != nil {
				t.Logf("metadata update: %v", err)
			}
			updateTook := wait("a metadata update", ch)
			updateBytes, updateTime := mn.sent.Load()-s2, rec.elapsed()

			// A death: a member stops answering (kill -9, or its host gone).
			dead := members[n/3]
			ch = rec.expect("leave", dead.meta.Name, n)
			dead.tr.down.Store(true)
			dead.ml.Shutdown()
			deathTook := wait("a death", ch)

			// What an event adds to the traffic at rest, cluster-wide.
			excess := func(b int64, d time.Duration) float64 {
				return max(0, float64(b)-restRate*float64(n)*undilate(d).Seconds()) / 1024
			}
			t.Logf("members | all joined | a join known to all | new metadata known to all | a death known to all | sent per member at rest | a join costs | new metadata costs | heap per member")
			t.Logf("| %d | %v | %v | %v | %v | %.0f B/s | %.0f KiB | %.0f KiB | %.0f KiB |", n, undilate(startup).Round(time.Second),
				joinTook, updateTook, deathTook,
				restRate, excess(joinBytes, joinTime), excess(updateBytes, updateTime), perMember/1024)
		})
	}
}

// TestScaleGossipModel is the message-level model of memberlist's dissemination
// (v0.7.0, DefaultLANConfig) for sizes too large to run in one process: every
// GossipInterval each member holding a broadcast sends it to GossipNodes random
// members, each member retransmitting it at most RetransmitMult × ⌈log10(N+1)⌉
// times; the rounds until every member has it give the time. The same model at
// the sizes TestScaleGossip runs is its check. Failure detection and push-pull
// follow memberlist's formulas (suspicionTimeout, pushPullScale).
func TestScaleGossipModel(t *testing.T) {
	scaleEnabled(t)
	cfg := memberlist.DefaultLANConfig()
	t.Logf("members | rounds to all (p50, p99 of 200 runs) | time to all | sends per broadcast | suspicion timeout (min, max) | push-pull every | state per push-pull")
	for _, n := range sizesFrom(t, "FLEETMUX_SCALE_MODEL", []int{250, 1000, 10000}) {
		limit := cfg.RetransmitMult * int(math.Ceil(math.Log10(float64(n+1))))
		var rounds []int
		sends := 0
		for range 200 {
			r, s := disseminate(n, cfg.GossipNodes, limit)
			rounds = append(rounds, r)
			sends += s
		}
		slices.Sort(rounds)
		p50, p99 := rounds[len(rounds)/2], rounds[len(rounds)*99/100]
		scale := math.Max(1, math.Log10(float64(n)))
		susMin := time.Duration(float64(cfg.SuspicionMult) * scale * float64(cfg.ProbeInterval))
		susMax := susMin * time.Duration(cfg.SuspicionMaxTimeoutMult)
		pp := cfg.PushPullInterval
		if n > 32 {
			pp *= time.Duration(math.Ceil(math.Log2(float64(n))-math.Log2(32)) + 1)
		}
		// A member's entry in a push-pull: its name, address, incarnation, state,
		// versions and metadata (msgpack), about 60 bytes besides the metadata.
		meta, _ := json.Marshal(gossipSample(1))
		state := n * (60 + len(meta))
		t.Logf("| %d | %d, %d | %v, %v | %d | %v, %v | %v | %.1f MiB |", n, p50, p99,
			time.Duration(p50)*cfg.GossipInterval, time.Duration(p99)*cfg.GossipInterval, sends/200,
			susMin.Round(time.Millisecond), susMax.Round(time.Millisecond), pp, float64(state)/(1<<20))
	}
}

// disseminate runs one broadcast from member 0 through n members, each sending
// to fanout random others per round while it has retransmits left; it returns
// the rounds until all have it and the messages sent.
func disseminate(n, fanout, limit int) (rounds, sends int) {
	left := make([]int, n) // retransmits left; -1: not informed yet
	for i := range left {
		left[i] = -1
	}
	left[0] = limit
	informed := 1
	for informed < n {
		rounds++
		var newly []int
		for i := range n {
			if left[i] <= 0 {
				continue
			}
			// memberlist takes a broadcast's transmit from its queue once per
			// target: a round spends up to fanout of them.
			for k := 0; k < fanout && left[i] > 0; k++ {
				sends++
				left[i]--
				j := mrand.IntN(n)
				if left[j] < 0 {
					left[j] = 0 // informed from the next round on
					newly = append(newly, j)
				}
			}
		}
		for _, j := range newly {
			left[j] = limit
		}
		informed += len(newly)
		if rounds > 1000 {
			break // died out: never for these sizes and limits
		}
	}
	return rounds, sends
}
