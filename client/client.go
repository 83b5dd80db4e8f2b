// Package client is the Go SDK for the fleetmux controller's HTTP API (DESIGN.md,
// "Controller HTTP API"). The fleetmux CLI is built on it.
//
// Every method takes a context first; replies are the wire types of package api.
// Errors of the API are *Error values that errors.Is matches against the sentinels
// (ErrNotFound, ErrBusy, …) by their code.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// DefaultAddr is the controller's default HTTP API address.
const DefaultAddr = "http://127.0.0.1:7070"

// defaultAddr is DefaultAddr (a test puts its own listener there).
var defaultAddr = DefaultAddr

// maxReplyBytes bounds a JSON reply read into memory.
const maxReplyBytes = 256 << 20

// maxErrorBytes bounds an error reply read into memory.
const maxErrorBytes = 64 << 10

// Config configures a Client.
type Config struct {
	// Addr is the controller's base URL, e.g. http://127.0.0.1:7070 (the default).
	// A bare host:port means http://host:port. A path is kept as a prefix (for a
	// controller behind a reverse proxy).
	Addr string
	// Token, when set, is sent as "Authorization: Bearer TOKEN".
	Token string
	// HTTPClient makes the requests; nil means a client without a timeout (contexts
	// bound the calls). A Timeout set on it also cuts Follow streams (Follow then
	// reconnects) and attach connections.
	HTTPClient *http.Client
	// Actor, when set, is sent as the Fleetmux-Actor header (it goes into the
	// controller's audit records).
	Actor string
}

// Client calls one controller. It is safe for concurrent use.
type Client struct {
	base  *url.URL // scheme and host, path without a trailing slash
	token string
	actor string
	hc    *http.Client
}

// New checks cfg and returns a Client. It makes no request.
func New(cfg Config) (*Client, error) {
	u, err := parseAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, token: cfg.Token, actor: cfg.Actor, hc: hc}, nil
}

// parseAddr turns a controller address into its base URL.
func parseAddr(addr string) (*url.URL, error) {
	if addr == "" {
		addr = defaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("client: controller address %q: %v", addr, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("client: controller address %q: scheme %q, want http or https", addr, u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("client: controller address %q has no host", addr)
	case u.User != nil:
		return nil, fmt.Errorf("client: controller address %q: credentials go in the token, not the URL", addr)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("client: controller address %q: no query or fragment allowed", addr)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Addr is the controller's base URL.
func (c *Client) Addr() string { return c.base.String() }

// SessionFilter narrows Sessions: Node (empty: every node) and Labels (all must match).
type SessionFilter = api.SessionFilter

// BlockQuery selects the text of one block (see api.BlockQuery).
type BlockQuery = api.BlockQuery

// WaitQuery says what Wait waits for (see api.WaitQuery).
type WaitQuery = api.WaitQuery

// Chunk is a piece of a session's raw output: Data starts at Offset; End is the
// session's output end and Oldest the oldest offset still readable when it was read.
type Chunk struct {
	Offset, End, Oldest int64
	Data                []byte
}

// Nodes lists the nodes the controller knows.
func (c *Client) Nodes(ctx context.Context) (api.NodeList, error) {
	var out api.NodeList
	err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out)
	return out, err
}

// Sessions lists sessions fleet-wide. Nodes that did not answer are named in the
// reply's Unavailable.
func (c *Client) Sessions(ctx context.Context, f SessionFilter) (api.SessionList, error) {
	var out api.SessionList
	q := url.Values{}
	if f.Node != "" {
		if err := checkName("node name", f.Node); err != nil {
			return out, err
		}
		q.Set("node", f.Node)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		q.Add("label", k+"="+f.Labels[k])
	}
	err := c.do(ctx, http.MethodGet, "/v1/sessions", q, nil, &out)
	return out, err
}

// NewSession creates a session; without req.Node the controller picks the node.
func (c *Client) NewSession(ctx context.Context, req api.NewSession) (api.Session, error) {
	var out api.Session
	if req.Node != "" {
		if err := checkName("node name", req.Node); err != nil {
			return out, err
		}
	}
	err := c.do(ctx, http.MethodPost, "/v1/sessions", nil, req, &out)
	return out, err
}

// Session reads one session.
func (c *Client) Session(ctx context.Context, node, id string) (api.Session, error) {
	var out api.Session
	err := c.sessionCall(ctx, http.MethodGet, node, id, "", nil, nil, &out)
	return out, err
}

// UpdateSession changes a session's title, description or labels.
func (c *Client) UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error) {
	var out api.Session
	err := c.sessionCall(ctx, http.MethodPatch, node, id, "", nil, p, &out)
	return out, err
}

// CloseSession closes a session and returns its final state.
func (c *Client) CloseSession(ctx context.Context, node, id string) (api.Session, error) {
	var out api.Session
	err := c.sessionCall(ctx, http.MethodDelete, node, id, "", nil, nil, &out)
	return out, err
}

// Run runs a command in a session and returns its block with the rendered text. When
// the timeout passes first, the block's State is still api.BlockRunning.
func (c *Client) Run(ctx context.Context, node, id string, body api.RunBody) (api.BlockResult, error) {
	var out api.BlockResult
	err := c.sessionCall(ctx, http.MethodPost, node, id, "/run", nil, body, &out)
	return out, err
}

// Input types raw text into a session.
func (c *Client) Input(ctx context.Context, node, id, data string) error {
	return c.sessionCall(ctx, http.MethodPost, node, id, "/input", nil, api.InputBody{Data: data}, nil)
}

// Keys sends named keys (C-c, Enter, Up, Tab, Esc, F1, …) to a session.
func (c *Client) Keys(ctx context.Context, node, id string, keys ...string) error {
	return c.sessionCall(ctx, http.MethodPost, node, id, "/keys", nil, api.KeysBody{Keys: keys}, nil)
}

// TakeOver gives the session's writer lease to the caller; the writer that held it
// is told. The reply names that writer (nil: nobody held it).
func (c *Client) TakeOver(ctx context.Context, node, id string) (api.TakeOver, error) {
	var out api.TakeOver
	err := c.sessionCall(ctx, http.MethodPost, node, id, "/take_over", nil, nil, &out)
	return out, err
}

// Resize sets a session's terminal size.
func (c *Client) Resize(ctx context.Context, node, id string, cols, rows int) (api.Session, error) {
	var out api.Session
	err := c.sessionCall(ctx, http.MethodPost, node, id, "/resize", nil, api.ResizeBody{Cols: cols, Rows: rows}, &out)
	return out, err
}

// Screen reads a session's current screen.
func (c *Client) Screen(ctx context.Context, node, id string) (api.Screen, error) {
	var out api.Screen
	err := c.sessionCall(ctx, http.MethodGet, node, id, "/screen", nil, nil, &out)
	return out, err
}

// Blocks lists a session's blocks.
func (c *Client) Blocks(ctx context.Context, node, id string) (api.BlockList, error) {
	var out api.BlockList
	err := c.sessionCall(ctx, http.MethodGet, node, id, "/blocks", nil, nil, &out)
	return out, err
}

// Block reads block n (1-based) with its text.
func (c *Client) Block(ctx context.Context, node, id string, n int, bq BlockQuery) (api.BlockResult, error) {
	var out api.BlockResult
	if n < 1 {
		return out, &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("block number %d: blocks count from 1", n)}
	}
	q := url.Values{}
	setInt(q, "offset", int64(bq.Offset))
	setInt(q, "limit", int64(bq.Limit))
	setInt(q, "max_bytes", int64(bq.MaxBytes))
	if bq.Grep != "" {
		q.Set("grep", bq.Grep)
	}
	err := c.sessionCall(ctx, http.MethodGet, node, id, "/blocks/"+strconv.Itoa(n), q, nil, &out)
	return out, err
}

// Wait waits until a session is in a state (or has output past wq.After). The
// result's OK is false when the timeout passed first.
func (c *Client) Wait(ctx context.Context, node, id string, wq WaitQuery) (api.WaitResult, error) {
	var out api.WaitResult
	q := url.Values{}
	q.Set("until", wq.Until)
	setInt(q, "timeout_ms", int64(wq.TimeoutMS))
	setInt(q, "after", wq.After)
	err := c.sessionCall(ctx, http.MethodGet, node, id, "/wait", q, nil, &out)
	return out, err
}

// Output reads a session's raw output from offset from to its end as it stood when
// the controller got the request, or at most max bytes of it (0: to the end), into
// memory (at most 256 MiB: OutputChunks streams any amount). The chunk's End is the
// output's end then, so Offset+len(Data) < End says more exists.
func (c *Client) Output(ctx context.Context, node, id string, from int64, max int) (Chunk, error) {
	data := []byte{}
	head, _, err := c.output(ctx, node, id, from, int64(max), func(ch Chunk) error {
		if int64(len(data)+len(ch.Data)) > maxReplyBytes {
			return fmt.Errorf("client: output of %s/%s over %d bytes: read it with OutputChunks or a smaller max", node, id, maxReplyBytes)
		}
		data = append(data, ch.Data...)
		return nil
	})
	if err != nil {
		return Chunk{}, err
	}
	head.Data = data
	return head, nil
}

// OutputChunks reads the same range as Output and calls fn with each piece as it
// arrives, in order (Offset: the piece's own; End and Oldest: the reply's), holding
// one piece in memory at a time (Data is reused once fn returns). It returns the offset after the last byte read. A
// range the controller cut short (its node went down mid-way) is an error wrapping
// io.ErrUnexpectedEOF, after fn got what arrived; an error of fn ends the read and
// is returned.
func (c *Client) OutputChunks(ctx context.Context, node, id string, from, maxBytes int64, fn func(Chunk) error) (next int64, err error) {
	_, next, err = c.output(ctx, node, id, from, maxBytes, fn)
	return next, err
}

// output reads an output range, calling fn with each piece (its Data is reused after
// fn returns), and returns the reply's offsets (head: a Chunk without Data).
func (c *Client) output(ctx context.Context, node, id string, from, maxBytes int64, fn func(Chunk) error) (head Chunk, next int64, err error) {
	resp, err := c.openOutput(ctx, node, id, from, maxBytes)
	if err != nil {
		return Chunk{}, from, err
	}
	defer resp.Body.Close()
	if head, err = outputHeaders(resp, from); err != nil {
		return Chunk{}, from, err
	}
	want := max(head.End, head.Offset) // the range: [Offset, End), or maxBytes of it
	if maxBytes > 0 {
		want = min(want, head.Offset+maxBytes)
	}
	next = head.Offset
	buf := make([]byte, max(1, min(want-head.Offset, api.MaxReadBytes)))
	for {
		n, rerr := io.ReadFull(resp.Body, buf)
		if n > 0 {
			ch := head
			ch.Offset, ch.Data = next, buf[:n]
			if err := fn(ch); err != nil {
				return head, next, err
			}
			next += int64(n)
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
			if next < want {
				return head, next, fmt.Errorf("client: output of %s/%s cut short at offset %d of %d: %w", node, id, next, want, io.ErrUnexpectedEOF)
			}
			return head, next, nil
		default:
			return head, next, fmt.Errorf("client: reading output of %s/%s: %w", node, id, rerr)
		}
	}
}

func (c *Client) openOutput(ctx context.Context, node, id string, from, maxBytes int64) (*http.Response, error) {
	if from < 0 || maxBytes < 0 {
		return nil, &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("output from %d, max %d: offsets and sizes are not negative", from, maxBytes)}
	}
	q := url.Values{}
	q.Set("from", strconv.FormatInt(from, 10))
	setInt(q, "max_bytes", maxBytes)
	return c.open(ctx, http.MethodGet, node, id, "/output", q)
}

// outputHeaders reads a reply's offsets (a Chunk without Data).
func outputHeaders(resp *http.Response, from int64) (Chunk, error) {
	var ch Chunk
	var err error
	if ch.Offset, err = int64Header(resp, api.HeaderOffset, from); err != nil {
		return Chunk{}, err
	}
	if ch.End, err = int64Header(resp, api.HeaderEnd, 0); err != nil {
		return Chunk{}, err
	}
	if ch.Oldest, err = int64Header(resp, api.HeaderOldest, 0); err != nil {
		return Chunk{}, err
	}
	return ch, nil
}

// Fanout runs one command on many targets (POST /v1/run).
func (c *Client) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	var out api.Fanout
	err := c.do(ctx, http.MethodPost, "/v1/run", nil, req, &out)
	return out, err
}

// Health reads GET /healthz. A degraded controller that answers 503 with a health
// body gives that body and no error.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var out api.Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, &out)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && e.health != nil {
		return *e.health, nil
	}
	return out, err
}

// ParseAddress splits a session address "NODE/ID" (api.ParseAddress).
func ParseAddress(s string) (node, id string, err error) { return api.ParseAddress(s) }

// CaptureReply returns a context that makes the call it is passed to store the raw
// bytes of the reply's body (a successful JSON reply) into *dst. The CLI uses it to
// print the API's JSON exactly (--json).
func CaptureReply(ctx context.Context, dst *[]byte) context.Context {
	return context.WithValue(ctx, captureKey{}, dst)
}

type captureKey struct{}

// sessionCall calls a route under /v1/sessions/{node}/{id}.
func (c *Client) sessionCall(ctx context.Context, method, node, id, suffix string, q url.Values, in, out any) error {
	p, err := sessionPath(node, id, suffix)
	if err != nil {
		return err
	}
	return c.do(ctx, method, p, q, in, out)
}

// sessionPath is /v1/sessions/{node}/{id}{suffix}, with the names checked.
func sessionPath(node, id, suffix string) (string, error) {
	if err := checkName("node name", node); err != nil {
		return "", err
	}
	if err := checkName("session id", id); err != nil {
		return "", err
	}
	return "/v1/sessions/" + url.PathEscape(node) + "/" + url.PathEscape(id) + suffix, nil
}

// checkName validates a name locally, so a bad one never reaches the wire.
func checkName(what, s string) error {
	if err := api.ValidName(s); err != nil {
		return &Error{Code: api.CodeBadRequest, Message: what + ": " + strings.Replace(err.Error(), api.ErrBadName.Error()+": ", "", 1)}
	}
	return nil
}

// do makes one JSON call: in (when non-nil) is the body, out (when non-nil) receives
// the reply.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	switch v := in.(type) {
	case nil:
	case rawBody:
		body, ct = bytes.NewReader(v.data), v.contentType
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: %s %s: encoding the body: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return readError(resp)
	}
	data, err := readLimited(resp.Body, maxReplyBytes)
	if err != nil {
		return fmt.Errorf("client: %s %s: reading the reply: %w", method, path, err)
	}
	if dst, ok := ctx.Value(captureKey{}).(*[]byte); ok && dst != nil {
		*dst = data
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Status: resp.StatusCode, Code: api.CodeInternal,
			Message: fmt.Sprintf("%s %s: the controller's reply is not the expected JSON (%v): %s", method, path, err, snippet(data))}
	}
	return nil
}

// open starts a GET under a session's routes and returns the response of a successful
// status (the caller closes its body).
func (c *Client) open(ctx context.Context, method, node, id, suffix string, q url.Values) (*http.Response, error) {
	p, err := sessionPath(node, id, suffix)
	if err != nil {
		return nil, err
	}
	req, err := c.request(ctx, method, p, q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// request builds a request with the client's headers.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + path
	// Names are checked, so path needs no escaping beyond what PathEscape did.
	u.RawPath = ""
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "fleetmux-client")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.setAuth(req.Header)
	return req, nil
}

func (c *Client) setAuth(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.actor != "" {
		h.Set(api.HeaderActor, c.actor)
	}
}

// readLimited reads r to its end, failing beyond limit bytes.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("reply over %d bytes", limit)
	}
	return data, nil
}

// int64Header parses an integer header; def when it is absent.
func int64Header(resp *http.Response, name string, def int64) (int64, error) {
	v := resp.Header.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, &Error{Status: resp.StatusCode, Code: api.CodeInternal, Message: fmt.Sprintf("bad %s header %q in the controller's reply", name, v)}
	}
	return n, nil
}

func setInt(q url.Values, k string, v int64) {
	if v != 0 {
		q.Set(k, strconv.FormatInt(v, 10))
	}
}
