// Package node is the fleetmux node agent: it keeps the PTY sessions of one host,
// serves them as the NATS micro service "fleetmux-node" (subjects
// <prefix>.rpc.<node>.<verb>), publishes their output, block events, session events
// and audit records, and records every session (asciicast v2 + block index) under its
// data directory.
//
// The node reaches the bus and the gossip layer only through the small interfaces in
// bus.go (cmd wires the concrete transports in), and its sessions only through
// sessionHandle (handle.go).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/delay"
	"github.com/fleetmux/fleetmux/internal/reclaim"
)

// Config configures a node. Name, DataDir and Bus are required.
type Config struct {
	// Name is the node name (api.ValidName), one subject token.
	Name string
	// Labels are gossiped and shown with the node.
	Labels map[string]string
	// DataDir holds the session id counter and the recordings; created if missing.
	DataDir string
	// Prefix is the NATS subject prefix (default api.DefaultPrefix).
	Prefix string
	// Bus is the message bus.
	Bus Bus
	// Verifier checks every request's signed envelope before anything else runs
	// (trust.Verifier of the fleet's root keys). Required: a node without one
	// would obey anyone who can publish to its subjects.
	Verifier Verifier
	// Gossip, when set, is told the node's metadata whenever it changes.
	Gossip Gossip
	// MaxSessions bounds the sessions alive at once (default api.DefaultMaxSessions).
	MaxSessions int
	// DefaultShell is used when a create request names neither shell nor argv
	// (default "bash").
	DefaultShell string
	// ScrollbackBytes is each session's scrollback ring (default session's).
	ScrollbackBytes int
	// RecordingMaxBytes caps one part of a session's recording (output.cast): once
	// the part holds this many bytes it is rotated, becoming output.<offset>.cast
	// (named after the output offset it starts at), and a new output.cast starts with
	// a fresh header (default DefaultRecordingMaxBytes). A part may exceed the cap by
	// one write of the recorder (at most 64 KiB of output, up to 6 times
	// that as JSON).
	RecordingMaxBytes int64
	// RecordingParts is how many parts of a session's recording are kept, the
	// current one included; rotating deletes the oldest beyond it, and the output
	// it held is gone (default DefaultRecordingParts).
	RecordingParts int
	// RecordingsMaxBytes caps all recordings under DIR/sessions together (default
	// DefaultRecordingsMaxBytes; negative: no cap). Over it, the node deletes whole
	// recordings of closed sessions, least recently written first, then the oldest
	// rotated parts of live sessions (never their current part): checked at start,
	// every minute and at every rotation.
	RecordingsMaxBytes int64
	// RecordingRetention: recordings of closed sessions last written longer ago are
	// deleted, checked as RecordingsMaxBytes is (default DefaultRecordingRetention;
	// negative: kept forever).
	RecordingRetention time.Duration
	// ReapExited is how long an exited session stays listed (its reap_at) before
	// the node closes it (default DefaultReapExited; negative: kept until closed).
	ReapExited time.Duration
	// WriterLease is how long a writer that typed into a session (input, keys, an
	// attach's keystrokes, a take-over) keeps its writer lease past their last
	// input (default api.WriterLease).
	WriterLease time.Duration
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Version is the agent's version (cmd's build version), gossiped in NodeMeta and
	// announced by the NATS service (default api.DevVersion).
	Version string
	// Policy is where the guardrail policy comes from (the FLEETMUX_POLICY bucket);
	// nil: no policy, everything is allowed. With a source, a request that needs a
	// decision waits (bounded) until the node has read it: nothing runs unchecked
	// while the node starts.
	Policy PolicySource
	// Holder, when set, keeps the sessions' programs and PTYs in a holder process
	// (package holder), so they outlive this agent: new sessions start there, Close
	// detaches from them instead of ending them, and New reattaches to every
	// session the holder keeps (held.go). nil: sessions live in this process.
	Holder *holder.Client
	// Self is the fleetmux binary: a claude agent's hooks run `Self agent-hook DIR`
	// (agenthook.go). Empty: this process's executable.
	Self string
	// Exposed says the node listens beyond loopback (its gossip): running without
	// a policy is then logged as a warning, not as information.
	Exposed bool
	// ReclaimAfter, when positive, returns the memory a burst of session starts and
	// ends left behind to the OS once none came for that long (package reclaim: a
	// forced GC of the whole process, once per burst). For a node that is a process
	// of its own (cmd sets it); 0: never.
	ReclaimAfter time.Duration
	// SandboxCaps, when set, is what the node takes its kernel to enforce instead
	// of what it probes (a test that simulates a kernel without a part).
	SandboxCaps *api.SandboxCaps
	// HideDataDir keeps every session out of DataDir and Hide also where the node
	// can make no mounts for it. Where the kernel has Landlock, a node always
	// does when it can (as root, or in a user namespace): each session gets a
	// mount namespace in which they are empty and read-only, kept so by a
	// Landlock domain. Otherwise only Landlock's allow-list is left: the directories on the way to DataDir are then granted
	// entry by entry as they are at each session's start, so DataDir belongs in a
	// directory of its own (e.g. /var/lib/fleetmux), never directly in /tmp or a
	// working directory (docs/sandbox.md).
	HideDataDir bool
	// Hide are paths beside DataDir that no session may read or write (e.g. the
	// node's NATS .creds file).
	Hide []string
}

// Node is a running node agent. Its methods are safe for concurrent use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	subj api.Subjects

	ctx    context.Context // cancelled by Close: stops every goroutine of the node
	cancel context.CancelFunc
	wg     sync.WaitGroup

	published atomic.Int64                // output bytes published, gossiped as NodeMeta.Published
	audits    *delay.Queue[func() []byte] // audit records (made when sent), published off the request path
	sweep     chan struct{}               // asks the janitor for a sweep (buffered 1)
	reapKick  chan struct{}               // asks the reaper to look (buffered 1; reap.go)
	reclaim   *reclaim.Quiet              // nil without Config.ReclaimAfter

	guard    *guard.Guard                 // everything decided before the node acts (guard.go)
	agents   *agent.Tracker               // the node's coding agents (agents.go)
	hooks    agentHooks                   // their hook channels (agenthook.go)
	aspans   agentSpans                   // their turns and tool calls as spans (trace.go)
	agentEvs *delay.Queue[api.AgentEvent] // their events, published off the caller's path
	spawnMu  sync.Mutex                   // one agent spawn at a time (agents.go)
	// heldSpawns: agent spawns held for a person's approval, by their create
	// request (agents.go); guarded by mu.
	heldSpawns map[*api.CreateRequest]*heldSpawn
	heldOrder  []*api.CreateRequest
	redaction  redaction // redact.go
	execs      execTable // one-shot processes (exec.go)

	mu       sync.Mutex // guards the fields below
	sessions map[string]*entry
	nextID   int
	idem     map[string]*idemRun // session + "\x00" + idempotency key → its run
	idemKeys []string            // insertion order, for bounding idem
	stop     func() error
	closed   bool
}

// New validates cfg and prepares the node. Serving starts with Run.
func New(cfg Config) (*Node, error) {
	if err := api.ValidName(cfg.Name); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if cfg.Bus == nil {
		return nil, errors.New("node: config has no bus")
	}
	if cfg.Verifier == nil {
		return nil, errors.New("node: config has no verifier: a node checks every request's signature (trust.Verifier of the fleet root key)")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("node: config has no data dir")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = api.DefaultPrefix
	}
	if err := api.ValidPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("node: prefix: %w", err)
	}
	if cfg.Version == "" {
		cfg.Version = api.DevVersion
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = api.DefaultMaxSessions
	}
	if cfg.RecordingMaxBytes < 0 || cfg.RecordingParts < 0 {
		return nil, errors.New("node: negative recording quota")
	}
	if cfg.RecordingMaxBytes == 0 {
		cfg.RecordingMaxBytes = DefaultRecordingMaxBytes
	}
	if cfg.RecordingParts == 0 {
		cfg.RecordingParts = DefaultRecordingParts
	}
	if cfg.RecordingsMaxBytes == 0 {
		cfg.RecordingsMaxBytes = DefaultRecordingsMaxBytes
	}
	if cfg.RecordingRetention == 0 {
		cfg.RecordingRetention = DefaultRecordingRetention
	}
	if cfg.ReapExited == 0 {
		cfg.ReapExited = DefaultReapExited
	}
	if cfg.WriterLease <= 0 {
		cfg.WriterLease = api.WriterLease
	}
	if cfg.DefaultShell == "" {
		cfg.DefaultShell = "bash"
	}
	if err := api.ValidLabels(cfg.Labels); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := datadir.Ensure(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	for _, d := range []string{filepath.Join(cfg.DataDir, "sessions"), filepath.Join(cfg.DataDir, "run"), filepath.Join(cfg.DataDir, "execs")} {
		if err := datadir.Mkdir(d); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger,
		subj:     api.Subjects{Prefix: cfg.Prefix},
		sessions: map[string]*entry{},
		idem:     map[string]*idemRun{},
		sweep:    make(chan struct{}, 1),
		reapKick: make(chan struct{}, 1),
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.log = n.log.With("node", cfg.Name)
	var err error
	if n.nextID, err = readCounter(n.counterPath()); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if cfg.ReclaimAfter > 0 {
		n.reclaim = reclaim.New(cfg.ReclaimAfter)
	}
	audit := n.subj.Audit(cfg.Name)
	n.audits = delay.New(AuditDelay, func(record func() []byte) {
		if b := record(); b != nil {
			_ = cfg.Bus.Publish(audit, nil, b)
		}
	})
	// Before any session: secrets stored before a restart are redacted too.
	n.guard, err = guard.New(guard.Config{
		Node: cfg.Name, Labels: cfg.Labels, DataDir: cfg.DataDir, Source: cfg.Policy, Exposed: cfg.Exposed,
		WriterLease: cfg.WriterLease, Logger: n.log, Audit: guardLink{n}, Events: guardLink{n},
	})
	if err != nil {
		n.audits.Close()
		n.cancel()
		return nil, fmt.Errorf("node: %w", err)
	}
	agentSubj := n.subj
	n.agentEvs = delay.New(AuditDelay, func(ev api.AgentEvent) {
		publishJSON(cfg.Bus, agentSubj.Agent(cfg.Name, ev.Agent), ev)
	})
	n.agents = agent.NewTracker(agent.Config{Node: cfg.Name, Publish: n.agentEvs.Add, Logger: n.log})
	n.guard.OnRedaction(n.followRedaction)
	n.guard.SetCreator(creator{n})
	// Background execs outlive an agent: those of the last one are found again.
	if err := n.execs.load(n.execsDir()); err != nil {
		n.log.Warn("background execs not loaded", "dir", n.execsDir(), "err", err)
	}
	if cfg.Holder != nil {
		if err := n.reattach(); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// AuditDelay is how long, at most, an audit record waits before it is published:
// records are not published with the reply, which the NATS server would then
// deliver only after storing them (see package delay).
const AuditDelay = 2 * time.Millisecond

// Run serves the node API until ctx is done, then closes the node (every session is
// closed, or with a Holder detached: they outlive the agent). It returns nil on a clean stop.
func (n *Node) Run(ctx context.Context) error {
	if err := n.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return n.Close()
}

// Start begins serving the node API; it does not block. Close stops it.
func (n *Node) Start() error {
	subjects := map[string]string{}
	for _, v := range api.NodeVerbs {
		subjects[v.Name] = n.subj.RPC(n.cfg.Name, v.Name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("node: closed")
	}
	if n.stop != nil {
		return errors.New("node: already started")
	}
	stop, err := n.cfg.Bus.Serve(api.ServiceName, n.cfg.Version, subjects, n.handle)
	if err != nil {
		return fmt.Errorf("node: serve: %w", err)
	}
	n.stop = stop
	n.gossipLocked()
	n.wg.Add(1)
	go n.janitor()
	if n.cfg.ReapExited > 0 {
		n.wg.Add(1)
		go n.reaper()
	}
	n.guard.Start()
	if n.cfg.Gossip != nil {
		n.wg.Add(1)
		go n.gossipPublished()
	}
	n.log.Info("node serving", "subject", n.subj.RPC(n.cfg.Name, "*"))
	return nil
}

// Close stops serving, closes every session and waits for every goroutine of the
// node. It is idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		n.wg.Wait()
		return nil
	}
	n.closed = true
	stop := n.stop
	entries := make([]*entry, 0, len(n.sessions))
	for _, e := range n.sessions {
		entries = append(entries, e)
	}
	n.mu.Unlock()
	var errs []error
	if stop != nil {
		if err := stop(); err != nil {
			errs = append(errs, fmt.Errorf("node: stop serving: %w", err))
		}
	}
	n.agents.Close() // its samplers end; the sessions are ended (or detached) below
	n.closeHooks()
	var wg sync.WaitGroup
	for _, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.cfg.Holder != nil {
				e.detach() // the sessions outlive the agent: held.go
			} else {
				e.close()
			}
		}()
	}
	wg.Wait()
	n.execs.close(n.cfg.Holder != nil) // with a holder, background execs outlive the agent as sessions do
	n.guard.Close()                    // pending approvals expire; what an approval typed has ended
	n.audits.Close()                   // every request has returned: its record is queued
	n.agentEvs.Close()
	n.cancel()
	n.wg.Wait()
	n.reclaim.Stop()
	return errors.Join(errs...)
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Sessions lists the node's sessions, ordered by id number.
func (n *Node) Sessions() []api.Session {
	n.mu.Lock()
	entries := make([]*entry, 0, len(n.sessions))
	for _, e := range n.sessions {
		entries = append(entries, e)
	}
	n.mu.Unlock()
	sort.Slice(entries, func(i, j int) bool { return entries[i].num < entries[j].num })
	out := make([]api.Session, len(entries))
	for i, e := range entries {
		out[i] = e.info()
	}
	return out
}

func (n *Node) counterPath() string { return filepath.Join(n.cfg.DataDir, "next-session-id") }

// readCounter reads the persisted next session number (1 when absent).
func readCounter(path string) (int, error) {
	b, err := datadir.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("node: session counter: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("node: session counter %s is corrupt: %q", path, b)
	}
	return v, nil
}

// allocIDLocked returns a fresh session id and persists the counter first, so an id
// is never reused while the data dir lives, even across a crash.
func (n *Node) allocIDLocked() (string, int, error) {
	num := n.nextID
	if err := datadir.WriteFile(n.counterPath(), []byte(strconv.Itoa(num+1)+"\n"), 0o600); err != nil {
		return "", 0, fmt.Errorf("node: session counter: %w", err)
	}
	n.nextID = num + 1
	return "s" + strconv.Itoa(num), num, nil
}

// gossipPublishedEvery is how often the node gossips its published byte count
// when it changed (metadata updates are broadcasts: keep them rare).
const gossipPublishedEvery = 5 * time.Second

// gossipPublished refreshes the gossiped published byte count until Close.
func (n *Node) gossipPublished() {
	defer n.wg.Done()
	t := time.NewTicker(gossipPublishedEvery)
	defer t.Stop()
	last := int64(0)
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if v := n.published.Load(); v != last {
			last = v
			n.mu.Lock()
			if !n.closed {
				n.gossipLocked()
			}
			n.mu.Unlock()
		}
	}
}

// metaLocked is what the node says of itself: in gossip, and in its list reply
// (a controller that learned of it from NATS alone reads it there).
func (n *Node) metaLocked() api.NodeMeta {
	return api.NodeMeta{Name: n.cfg.Name, Labels: n.cfg.Labels, Version: n.cfg.Version, Sessions: len(n.sessions), Proto: api.ProtocolVersion, Published: n.published.Load(), Sandbox: n.SandboxCaps().String()}
}

// gossipLocked tells the cluster the node's current metadata.
func (n *Node) gossipLocked() {
	if n.cfg.Gossip == nil {
		return
	}
	if err := n.cfg.Gossip.UpdateMeta(n.metaLocked()); err != nil {
		n.log.Warn("gossip metadata not updated", "err", err)
	}
}
