// Package gossip is the fleet's membership: a memberlist cluster (encrypted with the
// fleet's gossip key, on loopback too) in which every node announces its api.NodeMeta
// and every controller learns who is there (Start, *Gossip), the key's file
// (KeyPath, EnsureKey) and the rejoin of seeds (KeepJoined). memberlist's callbacks
// never block: they hand work to goroutines the *Gossip owns, and Close waits for
// them.
package gossip

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/hashicorp/memberlist"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInsecure: gossip was configured without a secret key.
	ErrInsecure = errors.New("gossip: a secret key is required")
	// ErrConfig: a configuration is invalid (the message says which field and why).
	ErrConfig = errors.New("gossip: invalid configuration")
	// ErrClosed: the member has left or was closed.
	ErrClosed = errors.New("gossip: closed")
	// ErrMetaTooLarge: metadata over MaxMetaSize bytes.
	ErrMetaTooLarge = errors.New("gossip: metadata too large")
	// ErrJoin: no seed could be joined.
	ErrJoin = errors.New("gossip: join failed")
)

const (
	// MaxMetaSize is the largest gossip metadata (JSON of api.NodeMeta), in bytes.
	MaxMetaSize = memberlist.MetaMaxSize
	// DefaultGossipPort is fleetmux's usual gossip port (cmd's --gossip-listen
	// default). Config.BindPort 0 does NOT mean this port: it means random.
	DefaultGossipPort = 7946
	// DefaultGossipBind is the default Config.BindAddr.
	DefaultGossipBind = "127.0.0.1"
)

// Member states.
const (
	MemberAlive   = "alive"
	MemberSuspect = "suspect"
	MemberDead    = "dead"
	MemberLeft    = "left"
)

// Config configures Start.
type Config struct {
	// Name is this member's name, unique in the cluster (api.ValidName). Required.
	Name string
	// BindAddr is the address gossip listens on (TCP and UDP). Default
	// DefaultGossipBind (loopback).
	BindAddr string
	// BindPort is the port (TCP and UDP). 0 picks a free port, as tests want; pass
	// DefaultGossipPort for the usual one.
	BindPort int
	// AdvertiseAddr and AdvertisePort are the address other members reach this one
	// at (behind NAT). Default: the bound address and port. With BindPort 0 the
	// advertised port is always the one picked.
	AdvertiseAddr string
	AdvertisePort int
	// Join lists seed members (host:port) that Start joins. Retrying is the
	// caller's business.
	Join []string
	// SecretKey encrypts and authenticates gossip (AES, 16, 24 or 32 bytes). Every
	// member of a cluster needs the same key; members with another key, or none,
	// cannot join. Required, on loopback too (KeyFile keeps one).
	SecretKey []byte
	// Meta is the metadata this member starts gossiping (at most MaxMetaSize bytes
	// as JSON); UpdateMeta replaces it.
	Meta api.NodeMeta
	// Logger receives memberlist's log at debug (its errors at warn).
	// Default slog.Default().
	Logger *slog.Logger
	// OnChange is called when a member (this one included) joins, changes its
	// metadata, leaves or dies. It runs on a goroutine the Gossip owns, one call at a
	// time; changes that arrive while it runs are coalesced: each changed member is
	// reported once, with its latest state. Optional.
	OnChange func(Member)
}

// Member is one member of the gossip cluster as seen from here.
type Member struct {
	Name string
	// Addr is host:port of the member's gossip listener.
	Addr string
	// State is MemberAlive, MemberDead (gone without leaving: crashed, cut off) or
	// MemberLeft (left with Leave or Close). memberlist reports no event when it
	// starts suspecting a member, so MemberSuspect is not reported yet.
	State string
	// Meta is the member's metadata (zero if it gossips none or invalid JSON).
	Meta api.NodeMeta
	// Since is when this member last changed state or metadata, as seen here.
	Since time.Time
}

// reapAfter is how long dead and left members stay in Members.
const reapAfter = time.Hour

// Gossip is a running memberlist member. It satisfies node's Gossip interface.
type Gossip struct {
	name     string
	log      *slog.Logger
	onChange func(Member)
	ml       *memberlist.Memberlist

	mu      sync.Mutex
	meta    []byte              // what NodeMeta hands memberlist
	members map[string]Member   // by name
	changed map[string]struct{} // names OnChange has not seen yet
	leaving map[string]bool     // members that gossiped leavingMeta
	left    bool                // this member has left: no more meta updates

	evSig   chan struct{}  // cap 1: members changed
	metaSig chan struct{}  // cap 1: meta changed, push it
	stop    chan struct{}  // closed by Close
	loops   sync.WaitGroup // eventLoop, metaLoop
	joins   sync.WaitGroup // Join attempts

	life      sync.Mutex // orders Join/Leave against Close (memberlist panics on Leave after Shutdown)
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Start starts a memberlist member and, when cfg.Join is set, joins those
// seeds. If none of them can be joined it returns the running *Gossip together with
// an error wrapping ErrJoin: the caller may retry with Join, and must Close it either
// way. Other errors (ErrConfig, ErrInsecure, ErrMetaTooLarge, a port in use) return a
// nil *Gossip.
func Start(ctx context.Context, cfg Config) (*Gossip, error) {
	mlc, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	meta, err := encodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	g := &Gossip{
		name:     cfg.Name,
		log:      cmp.Or(cfg.Logger, slog.Default()),
		onChange: cfg.OnChange,
		meta:     meta,
		members:  make(map[string]Member),
		changed:  make(map[string]struct{}),
		leaving:  make(map[string]bool),
		evSig:    make(chan struct{}, 1),
		metaSig:  make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	mlc.Delegate = delegate{g}
	mlc.Events = eventDelegate{g}
	mlc.Logger = log.New(&memberlistLog{l: g.log}, "", 0)
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("transport: gossip on %s: %w", net.JoinHostPort(mlc.BindAddr, fmt.Sprint(cfg.BindPort)), err)
	}
	g.ml = ml
	g.loops.Add(2)
	go g.eventLoop()
	go g.metaLoop()
	g.log.Debug("gossip started", "node", g.name, "addr", g.Addr())
	if len(cfg.Join) > 0 {
		if _, err := g.Join(ctx, cfg.Join); err != nil {
			return g, err
		}
	}
	return g, nil
}

func (cfg Config) memberlistConfig() (*memberlist.Config, error) {
	if err := api.ValidName(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: gossip name: %w", ErrConfig, err)
	}
	bind := cfg.BindAddr
	if bind == "" {
		bind = DefaultGossipBind
	}
	if net.ParseIP(strings.Trim(bind, "[]")) == nil {
		return nil, fmt.Errorf("%w: gossip bind address %q is not an IP address", ErrConfig, bind)
	}
	if cfg.BindPort < 0 || cfg.BindPort > 65535 || cfg.AdvertisePort < 0 || cfg.AdvertisePort > 65535 {
		return nil, fmt.Errorf("%w: gossip port out of range", ErrConfig)
	}
	switch len(cfg.SecretKey) {
	case 0:
		// Also on loopback: any local user could join a member of their own,
		// which the controller would then route new sessions to.
		return nil, fmt.Errorf("%w: gossip needs a secret key (16, 24 or 32 bytes), on loopback too", ErrInsecure)
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("%w: gossip secret key is %d bytes; want 16, 24 or 32", ErrConfig, len(cfg.SecretKey))
	}

	mlc := memberlist.DefaultLANConfig()
	if api.IsLoopbackHost(bind) {
		// Every member is on this machine: probe and gossip fast, time out soon.
		mlc.TCPTimeout = 2 * time.Second
		mlc.IndirectChecks = 1
		mlc.RetransmitMult = 2
		mlc.SuspicionMult = 3
		mlc.ProbeInterval = 500 * time.Millisecond
		mlc.ProbeTimeout = 250 * time.Millisecond
		mlc.GossipInterval = 50 * time.Millisecond
		mlc.PushPullInterval = 10 * time.Second
		mlc.GossipToTheDeadTime = 10 * time.Second
	}
	mlc.Name = cfg.Name
	mlc.BindAddr = strings.Trim(bind, "[]")
	mlc.BindPort = cfg.BindPort
	mlc.AdvertiseAddr = cfg.AdvertiseAddr
	mlc.AdvertisePort = cfg.BindPort
	if cfg.AdvertisePort != 0 {
		mlc.AdvertisePort = cfg.AdvertisePort
	}
	mlc.DeadNodeReclaimTime = 30 * time.Second // a restarted member may come back on a new address
	mlc.SecretKey = slices.Clone(cfg.SecretKey)
	return mlc, nil
}

func encodeMeta(meta api.NodeMeta) ([]byte, error) {
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("transport: gossip metadata: %w", err)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes of JSON, the limit is %d (fewer or shorter labels)", ErrMetaTooLarge, len(b), MaxMetaSize)
	}
	return b, nil
}

// Name is this member's name.
func (g *Gossip) Name() string { return g.name }

// Addr is this member's advertised gossip address, host:port: what others Join.
func (g *Gossip) Addr() string { return g.ml.LocalNode().Address() }

// UpdateMeta replaces the metadata this member gossips and pushes it to the cluster in
// the background; it never blocks on the network. It fails with ErrMetaTooLarge
// when the JSON is over MaxMetaSize bytes (and then changes nothing).
func (g *Gossip) UpdateMeta(meta api.NodeMeta) error {
	b, err := encodeMeta(meta)
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.left {
		g.mu.Unlock()
		return fmt.Errorf("%w: gossip: this member has left the cluster", ErrClosed)
	}
	g.meta = b
	if m, ok := g.members[g.name]; ok {
		m.Meta = meta
		g.members[g.name] = m
	}
	g.mu.Unlock()
	select {
	case g.metaSig <- struct{}{}:
	default: // a push is pending already; it will read the newest meta
	}
	return nil
}

// Members lists the members known here, this one included, sorted by name. Dead
// and left members stay listed for a while (an hour) with their last metadata.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Join contacts the given members (host:port) and syncs state with them. It returns
// how many were reached; if none was, the error wraps ErrJoin. When ctx ends first
// Join returns its error while the attempt finishes in the background.
func (g *Gossip) Join(ctx context.Context, addrs []string) (int, error) {
	g.life.Lock()
	if g.closed {
		g.life.Unlock()
		return 0, fmt.Errorf("%w: gossip join", ErrClosed)
	}
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	g.joins.Add(1)
	go func() { // owned by g: Close waits for it
		defer g.joins.Done()
		n, err := g.ml.Join(addrs)
		res <- result{n, err}
	}()
	g.life.Unlock()
	select {
	case r := <-res:
		if r.n == 0 {
			return 0, fmt.Errorf("%w: %s: %w", ErrJoin, strings.Join(addrs, ", "), r.err)
		}
		g.log.Debug("gossip joined", "node", g.name, "contacted", r.n)
		return r.n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %s: %w", ErrJoin, strings.Join(addrs, ", "), ctx.Err())
	}
}

// Leave tells the cluster this member is leaving (others see it as left, not dead)
// and waits until that is sent or ctx ends (default bound 1s). The member keeps
// running until Close; UpdateMeta fails after Leave.
func (g *Gossip) Leave(ctx context.Context) error {
	g.life.Lock()
	defer g.life.Unlock()
	if g.closed {
		return fmt.Errorf("%w: gossip leave", ErrClosed)
	}
	return g.leave(ctx)
}

func (g *Gossip) leave(ctx context.Context) error {
	deadline := time.Now().Add(time.Second)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	// First tell the others this member is leaving (see eventDelegate), with a
	// third of the time, then leave.
	g.mu.Lock()
	first := !g.left
	g.left = true
	g.meta = leavingMeta
	g.mu.Unlock()
	if first {
		if err := g.ml.UpdateNode(max(time.Until(deadline)/3, time.Millisecond)); err != nil {
			g.log.Debug("gossip leaving notice not confirmed", "node", g.name, "err", err)
		}
	}
	if err := g.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("transport: gossip leave: %w", err)
	}
	return nil
}

// Close leaves the cluster (waiting at most a second for the messages to go out),
// shuts memberlist down and waits for the Gossip's goroutines (an OnChange call in
// progress, a Join in progress). It is idempotent.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		g.life.Lock()
		g.closed = true
		g.life.Unlock()
		close(g.stop)
		g.loops.Wait() // no metadata push runs while memberlist leaves and shuts down
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := g.leave(ctx); err != nil {
			g.log.Debug("gossip leave before close", "node", g.name, "err", err)
		}
		cancel()
		if err := g.ml.Shutdown(); err != nil {
			g.closeErr = fmt.Errorf("transport: gossip shutdown: %w", err)
		}
		g.joins.Wait()
	})
	return g.closeErr
}
