// Package presence tells which nodes hold a NATS connection, by the identity the
// server authenticated: the controller's liveness reads it (Watcher).
package presence

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats.go"
)

// Defaults of Config.
const (
	DefaultResync = 30 * time.Second
	DefaultGather = 300 * time.Millisecond
)

// Config configures New.
type Config struct {
	// Resync is how often the full list of connections is asked for again, which
	// repairs what advisories cannot tell (a server of the cluster that died with
	// its clients' connections: nobody sends their disconnects). Default
	// DefaultResync.
	Resync time.Duration
	// Gather is how long the replies of the cluster's servers to one list request
	// are collected. Default DefaultGather.
	Gather time.Duration
	// Logger receives the operator's log. Default slog.Default().
	Logger *slog.Logger
}

// Watcher tells which nodes hold a NATS connection, by the name in the user JWT
// the server authenticated (Identity.UserName "node:NAME"), never by a name the
// client chose (its connection name): the server's connect and disconnect
// advisories of the fleet account (natsauth.AdvisoryConnect, natsauth.AdvisoryDisconnect), and the
// account's connection list (natsauth.ConnzRequest) at the start, after each reconnect of
// this connection, and every Resync. It needs no system account access: the
// advisories are imported into the fleet account (Authority.AccountJWT) and the
// list is the account's own. It satisfies the controller's Presence interface.
type Watcher struct {
	conn *transport.Conn
	cfg  Config
}

// New makes a presence watcher over conn (a controller's connection).
func New(conn *transport.Conn, cfg Config) *Watcher {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Gather <= 0 {
		cfg.Gather = DefaultGather
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Watcher{conn: conn, cfg: cfg}
}

// connEvent is one advisory, handed from the NATS callback to the watch loop.
type connEvent struct {
	id, node string
	up       bool
}

// watch is one Watch: its state lives on its loop goroutine.
type watch struct {
	p  *Watcher
	fn func(connected map[string]bool, known bool)

	mu     sync.Mutex // guards queue
	queue  []connEvent
	wake   chan struct{} // cap 1: events queued or a resync is due
	resync chan struct{} // cap 1: this connection reconnected
	stop   chan struct{}
	done   chan struct{}

	conns   map[string]string // connection id -> node, while known
	known   bool
	last    map[string]bool // what fn was told last
	lastOK  bool
	warned  bool
	syncing bool
	came    map[string]string // connects seen while a list request was out
	confirm bool              // an advisory came: the server's list must confirm it
}

// Watch calls fn with the set of nodes that hold a NATS connection each time it
// changes, and with known false as long as no list of connections could be had
// (the server answers no natsauth.ConnzRequest: it runs without a system account). fn runs
// on the watch's own goroutine, one call at a time; it must not block and must not
// keep connected. Its first call comes with the first list (or its failure). A
// failed list later keeps the last one (the advisories go on). stop ends the
// watch and returns once fn is no longer running.
func (p *Watcher) Watch(fn func(connected map[string]bool, known bool)) (stop func(), err error) {
	w := &watch{p: p, fn: fn, wake: make(chan struct{}, 1), resync: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), conns: map[string]string{}}
	var stops []func() error
	for _, s := range []struct {
		subject string
		up      bool
	}{{natsauth.AdvisoryConnect, true}, {natsauth.AdvisoryDisconnect, false}} {
		stopSub, err := p.conn.Subscribe(s.subject, func(_ string, h map[string]string, data []byte) {
			// The server's advisories carry no headers; a stream's message
			// delivered here (a pull with this reply subject) does.
			if len(h) > 0 {
				return
			}
			if ev, ok := parseAdvisory(data, s.up); ok {
				w.push(ev)
			}
		})
		if err != nil {
			for _, f := range stops {
				f()
			}
			return nil, err
		}
		stops = append(stops, stopSub)
	}
	removeHook := p.conn.OnReconnect(func() { signal(w.resync) })
	signal(w.resync) // the first list
	go w.loop()      // owned by the watch: ends with stop
	var once sync.Once
	return func() {
		once.Do(func() {
			removeHook()
			for _, f := range stops {
				f()
			}
			close(w.stop)
			<-w.done
		})
	}, nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push queues an advisory; called from the NATS callback, it never blocks.
func (w *watch) push(ev connEvent) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	signal(w.wake)
}

// listReply is one server's answer to natsauth.ConnzRequest.
type listReply struct {
	server string
	conns  map[string]string // id -> node
	total  int
	err    error
}

func (w *watch) loop() {
	defer close(w.done)
	tick := time.NewTicker(w.p.cfg.Resync)
	defer tick.Stop()
	type listed struct {
		m   map[string]string
		err error
	}
	lists := make(chan listed, 1) // a finished list request
	var listStop chan struct{}
	again := false             // a resync came while a list was out
	var retry <-chan time.Time // a failed first list is tried again soon
	startList := func() {
		if w.syncing {
			again = true
			return
		}
		w.syncing, again, retry = true, false, nil
		w.came = map[string]string{}
		listStop = make(chan struct{})
		go func(stop chan struct{}) { // owned by the loop: it waits for the result below
			m, err := w.p.list(stop)
			lists <- listed{m, err}
		}(listStop)
	}
	for {
		select {
		case <-w.stop:
			if w.syncing {
				close(listStop)
				<-lists
			}
			return
		case <-w.resync:
			startList()
		case <-tick.C:
			startList()
		case <-retry:
			startList()
		case l := <-lists:
			w.syncing = false
			if l.err == nil {
				maps.Copy(l.m, w.came)
				w.conns, w.known = l.m, true
			} else {
				w.logList(l.err)
				if !w.known {
					retry = time.After(listRetry)
				}
			}
			w.came = nil
			w.drain()
			w.report() // known, or still not known (told once)
			if again {
				startList()
			}
		case <-w.wake:
			w.drain()
			if w.known {
				w.report()
			}
			if w.confirm {
				w.confirm = false
				startList()
			}
		}
	}
}

// listRetry is how soon a connection list is asked for again while none came yet.
const listRetry = time.Second

// drain applies the queued advisories. An advisory is only a hint: anything on
// the advisory subjects of the account that looks like one (a message some
// JetStream request was made to answer there, with stored bytes a session
// printed) could be taken for one. So a connect counts at once, a disconnect
// only when it names the node that holds that connection, and either makes the
// server's list of connections (what the server itself answers, on this
// controller's own inbox) confirm it: a disconnect takes effect with that list.
func (w *watch) drain() {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, ev := range q {
		if ev.up {
			w.conns[ev.id] = ev.node
			if w.came != nil {
				w.came[ev.id] = ev.node
			}
			w.confirm = true
			continue
		}
		if node, ok := w.conns[ev.id]; ok && node == ev.node {
			if w.came != nil {
				delete(w.came, ev.id)
			}
			w.confirm = true
		}
	}
}

// report calls fn when what it would be told changed.
func (w *watch) report() {
	set := make(map[string]bool, len(w.conns))
	if w.known {
		for _, node := range w.conns {
			set[node] = true
		}
	}
	if w.last != nil && w.lastOK == w.known && maps.Equal(set, w.last) {
		return
	}
	w.last, w.lastOK = set, w.known
	w.fn(maps.Clone(set), w.known)
}

func (w *watch) logList(err error) {
	if w.known {
		w.p.cfg.Logger.Warn("nats connection list failed; keeping the last one", "err", err)
		return
	}
	if !w.warned {
		w.warned = true
		w.p.cfg.Logger.Warn("nats connection list not available: node liveness falls back to gossip alone (does the server run with the fleet's system account?)", "err", err)
	}
}

// errNoList: the request for the connection list got no answer.
var errNoList = errors.New("presence: no server answered the connection list request")

// list asks every server of the cluster for the fleet account's connections and
// merges their answers (collected for Gather after the first). stop ends it early.
func (p *Watcher) list(stop chan struct{}) (map[string]string, error) {
	if !p.conn.Connected() {
		return nil, fmt.Errorf("presence: connection list: %w", nats.ErrConnectionReconnecting)
	}
	nc := p.conn.NC()
	inbox := nc.NewRespInbox()
	// The callback only hands the replies over: one server's list of 10,000
	// connections is 20 MiB of JSON, which takes longer to parse than the first
	// reply may take to come.
	replies := make(chan []byte, 64)
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		select {
		case replies <- m.Data:
		default: // more servers than the buffer in one gather: the next resync has them
		}
	})
	if err != nil {
		return nil, fmt.Errorf("presence: connection list: %w", err)
	}
	defer sub.Unsubscribe()
	body, _ := json.Marshal(map[string]any{"auth": true, "limit": maxListedConns})
	if err := nc.PublishRequest(natsauth.ConnzRequest, inbox, body); err != nil {
		return nil, fmt.Errorf("presence: connection list: %w", err)
	}
	first := time.NewTimer(firstListReply)
	defer first.Stop()
	out := map[string]string{}
	merge := func(data []byte) error {
		r := parseList(data)
		if r.err != nil {
			return r.err
		}
		if r.total > len(r.conns) && r.total > maxListedConns {
			return fmt.Errorf("presence: connection list of server %s cut at %d of %d", r.server, maxListedConns, r.total)
		}
		maps.Copy(out, r.conns)
		return nil
	}
	var gather <-chan time.Time
	got := 0
	for {
		select {
		case <-stop:
			return nil, transport.ErrClosed
		case <-first.C:
			if got == 0 {
				return nil, errNoList
			}
		case <-gather:
			for { // the replies that came in time, parsed or not
				select {
				case data := <-replies:
					if err := merge(data); err != nil {
						return nil, err
					}
				default:
					return out, nil
				}
			}
		case data := <-replies:
			got++
			if gather == nil {
				gather = time.After(p.cfg.Gather) // from the first reply's arrival
			}
			if err := merge(data); err != nil {
				return nil, err
			}
		}
	}
}

// firstListReply is how long a connection list request waits for the first
// server's reply before it takes the server for one that never answers: a
// server builds a list of 10,000 connections (20 MiB) in one to six seconds,
// as busy as it is (docs/scale.md).
const firstListReply = 10 * time.Second

// maxListedConns bounds one server's connection list.
const maxListedConns = 1 << 16

// parseList reads one server's connz reply: the open connections of node
// identities.
func parseList(data []byte) listReply {
	var resp struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Data *struct {
			ID    string `json:"server_id"`
			Total int    `json:"total"`
			Conns []struct {
				CID uint64 `json:"cid"`
				JWT string `json:"jwt"`
				Acc string `json:"account"`
			} `json:"connections"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return listReply{err: fmt.Errorf("presence: connection list: %w", err)}
	}
	if resp.Error != nil {
		return listReply{err: fmt.Errorf("presence: connection list: %d %s", resp.Error.Code, resp.Error.Description)}
	}
	if resp.Data == nil {
		return listReply{err: errors.New("presence: connection list: empty reply")}
	}
	server := resp.Data.ID
	if server == "" {
		server = resp.Server.ID
	}
	r := listReply{server: server, total: resp.Data.Total, conns: map[string]string{}}
	jwts := 0
	for _, c := range resp.Data.Conns {
		if c.JWT != "" {
			jwts++
		}
		if node, ok := natsauth.NodeOfJWT(c.JWT, c.Acc); ok {
			r.conns[connID(server, c.CID)] = node
		}
	}
	if len(resp.Data.Conns) > 0 && jwts == 0 {
		// Not even the asking controller's own connection carries a user JWT: the
		// server does not authenticate with the fleet's operator, so nobody's
		// identity can be told.
		return listReply{err: errors.New("presence: connection list: the server's clients have no user JWTs (not in operator mode)")}
	}
	return r
}

// parseAdvisory reads a connect or disconnect advisory of a node identity.
func parseAdvisory(data []byte, up bool) (connEvent, bool) {
	var ev struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Client struct {
			ID  uint64 `json:"id"`
			Acc string `json:"acc"`
			JWT string `json:"jwt"`
		} `json:"client"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Server.ID == "" || ev.Client.ID == 0 {
		return connEvent{}, false
	}
	node, ok := natsauth.NodeOfJWT(ev.Client.JWT, ev.Client.Acc)
	if !ok {
		return connEvent{}, false
	}
	return connEvent{id: connID(ev.Server.ID, ev.Client.ID), node: node, up: up}, true
}

func connID(server string, cid uint64) string { return server + "/" + strconv.FormatUint(cid, 10) }
