package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// The fleet's change stream (GET /v1/events): server-sent events that tell the
// console's lists (fleet, sessions, approvals, agents) when to fetch again, instead
// of fetching on a timer. An event says only what changed and where, never its
// content: the page asks the API, which checks what its caller may see.
//
//	event: session
//	data: {"node":"n1","id":"s3"}
//
// Events: "session" (a session was created, changed state, started or finished a
// block, exited or closed), "approval", "agent", "node" (the node table changed:
// status, labels, counts; looked at every eventsNodeEvery), and "resync" (changes
// were dropped: fetch everything). A comment line every eventsPing keeps proxies
// from closing an idle stream.
const (
	eventsQueue     = 256 // changes waiting for one client; past it, one resync
	eventsPing      = 15 * time.Second
	eventsNodeEvery = time.Second
)

// eventsRetryMS is the reconnect delay the stream asks of EventSource.
const eventsRetryMS = 2000

type change struct{ kind, node, id string }

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan change, eventsQueue)
	var dropped atomic.Bool
	stop, err := s.fleet.WatchFleet(func(kind, node, id string) {
		select {
		case ch <- change{kind, node, id}:
		default:
			dropped.Store(true)
		}
	})
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	defer stop()
	valid := s.stillValid(r)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", eventsRetryMS); err != nil {
		return
	}
	fl.Flush()

	send := func(event string, data any) error {
		b, _ := json.Marshal(data) // names are validated: no newline reaches a line
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		return err
	}
	ctx := r.Context()
	ping := time.NewTicker(eventsPing)
	defer ping.Stop()
	nodeTick := time.NewTicker(eventsNodeEvery)
	defer nodeTick.Stop()
	var lastNodes []byte
	if nl, err := s.fleet.Nodes(ctx); err == nil {
		lastNodes, _ = json.Marshal(nl)
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-s.streamCtx.Done():
			return
		case c := <-ch:
			err = send(c.kind, map[string]string{"node": c.node, "id": c.id})
		case <-nodeTick.C:
			if nl, nerr := s.fleet.Nodes(ctx); nerr == nil {
				if b, _ := json.Marshal(nl); string(b) != string(lastNodes) {
					lastNodes = b
					err = send("node", struct{}{})
				}
			}
		case <-ping.C:
			_, err = fmt.Fprint(w, ": ping\n\n")
		}
		if err == nil && dropped.Swap(false) {
			err = send("resync", struct{}{})
		}
		if err != nil || !valid() {
			return // the client went, or its token was revoked or expired
		}
		fl.Flush()
	}
}
