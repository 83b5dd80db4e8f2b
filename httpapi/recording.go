package httpapi

import (
	"context"
	"net/http"

	"github.com/fleetmux/fleetmux/api"
)

// recording serves GET /v1/sessions/{node}/{id}/recording[?format=v3|v2]: the
// session's whole recording as one asciicast file, streamed as the controller reads
// it from the node (api/recording.go says what it holds). Content-Type
// application/x-asciicast; v3 by default, v2 with format=v2. Errors found before the
// first byte (unknown session, no recording, the node down) are JSON as everywhere;
// one after it ends the body early (an aborted response, never a silently shorter
// file that looks whole). Viewers may read it, like the output.
func (s *Server) recording(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	format := api.RecordingV3
	switch f := r.URL.Query().Get("format"); f {
	case "", "v3", "3":
	case "v2", "2":
		format = api.RecordingV2
	default:
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "format=%q: want v3 or v2", f))
		return
	}
	// A long download ends when the server shuts down, as the output's streams do.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.streamCtx, cancel)()
	s.reqWG.Add(1)
	defer s.reqWG.Done()
	body := &recordingBody{w: w, node: node, id: id, valid: s.stillValid(r)}
	err = s.fleet.Recording(ctx, node, id, format, body)
	switch {
	case err != nil && !body.started:
		s.reply(w, r, nil, err)
	case err != nil:
		s.log.Debug("recording cut short", "node", node, "session", id, "err", err)
		panic(http.ErrAbortHandler)
	case !body.started:
		body.start() // an empty answer cannot happen (the header comes first); be whole anyway
	}
}

// recordingBody writes the recording's bytes, sending the response header at the
// first write, and checks before each that the request's token is still accepted.
type recordingBody struct {
	w        http.ResponseWriter
	node, id string
	valid    func() bool
	started  bool
}

func (b *recordingBody) start() {
	h := b.w.Header()
	h.Set("Content-Type", api.RecordingContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", `inline; filename="`+b.node+"-"+b.id+`.cast"`) // names are [A-Za-z0-9_-]
	b.w.WriteHeader(http.StatusOK)
	b.started = true
}

func (b *recordingBody) Write(p []byte) (int, error) {
	if !b.valid() {
		return 0, errRevoked
	}
	if !b.started {
		b.start()
	}
	return b.w.Write(p)
}
