package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// MaxInFlight is how many requests one Serve runs at once; a request beyond that is
// answered at once with an api.Error of code api.CodeBusy.
const MaxInFlight = 256

// MaxLongInFlight is how many of those may be long requests (api.LongVerb: run,
// wait, which a caller may hold for minutes): the rest stay for short verbs, so
// that waiting clients never keep a node from answering ls, screen or input. A long
// request beyond it is answered with code api.CodeBusy.
const MaxLongInFlight = MaxInFlight * 3 / 4

// ServeFunc answers one request of Serve: verb is the endpoint, subject the subject the
// request was published to (signed requests name it), header holds the first value
// of each request header, and the returned bytes are the reply body. ctx is
// cancelled when the service stops.
type ServeFunc = func(ctx context.Context, verb, subject string, header map[string]string, data []byte) ([]byte, *api.Error)

// Serve answers requests as the NATS micro service name/version (discoverable with
// `nats micro ls`; a version that is not semver, such as "v0.2.0" or "dev", is
// announced as ServiceVersion makes it), one endpoint per verb on the given subject (verb → subject), until
// the returned stop is called or the Conn is closed.
//
// Each request runs handle on a goroutine of its own (a reused worker), at most
// MaxInFlight at once (MaxLongInFlight of them long: api.LongVerb; the ctx of a
// long one also ends when its caller left, see api.HeaderCancelID); beyond that the request is answered
// with a service error of code api.CodeBusy without running handle, so a slow handler never
// holds up the others. stop unsubscribes, cancels the handlers' ctx and waits for
// them to return; requests that arrive while stopping are
// answered with code api.CodeUnavailable. stop is idempotent.
func (c *Conn) Serve(name, version string, subjects map[string]string, handle ServeFunc) (stop func() error, err error) {
	if handle == nil {
		return nil, fmt.Errorf("%w: serve %s: nil handler", ErrConfig, name)
	}
	if len(subjects) == 0 {
		return nil, fmt.Errorf("%w: serve %s: no endpoints", ErrConfig, name)
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing || c.nc.IsClosed() {
		return nil, fmt.Errorf("%w: serve %s", ErrClosed, name)
	}

	svc, err := micro.AddService(c.nc, micro.Config{Name: name, Version: ServiceVersion(version)})
	if err != nil {
		return nil, fmt.Errorf("transport: serve %s %s: %w", name, version, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{
		conn:    c,
		svc:     svc,
		name:    name,
		handle:  handle,
		log:     c.log.With("service", name),
		ctx:     ctx,
		cancel:  cancel,
		sem:     make(chan struct{}, MaxInFlight),
		cancels: map[cancelKey]*cancelEntry{},
		long:    make(chan struct{}, MaxLongInFlight),
		work:    make(chan job),
	}
	verbs := make([]string, 0, len(subjects))
	for verb := range subjects {
		verbs = append(verbs, verb)
	}
	slices.Sort(verbs)
	for _, verb := range verbs {
		subject := subjects[verb]
		if err := svc.AddEndpoint(verb, s.dispatch(verb), micro.WithEndpointSubject(subject)); err != nil {
			cancel()
			_ = svc.Stop()
			s.unsubscribe()
			return nil, fmt.Errorf("transport: serve %s: endpoint %s on %s: %w", name, verb, subject, err)
		}
		if api.LongVerb(verb) {
			sub, err := c.nc.Subscribe(subject+cancelSuffix, s.onCancel(verb))
			if err != nil {
				cancel()
				_ = svc.Stop()
				s.unsubscribe()
				return nil, fmt.Errorf("transport: serve %s: cancel subject of %s: %w", name, verb, err)
			}
			s.subs = append(s.subs, sub)
		}
	}

	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		cancel()
		_ = svc.Stop()
		s.unsubscribe()
		return nil, fmt.Errorf("%w: serve %s", ErrClosed, name)
	}
	c.nextSvc++
	s.id = c.nextSvc
	c.services[s.id] = s.stop
	c.mu.Unlock()
	// When connected, make sure the server has the subscriptions before returning, so
	// a request sent right after Serve finds its responder (bounded; while
	// disconnected they are sent on reconnect).
	if c.nc.IsConnected() {
		_ = c.nc.FlushTimeout(2 * time.Second)
	}
	return s.stop, nil
}

// served is one running Serve.
type served struct {
	conn   *Conn
	id     int
	svc    micro.Service
	name   string
	handle ServeFunc
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{} // one token per running handler
	long   chan struct{} // one token per running long handler (api.LongVerb), besides its sem token

	work chan job     // hands a request to an idle worker
	idle atomic.Int32 // workers waiting on work

	mu      sync.Mutex // guards stopped and wg.Add against wg.Wait
	stopped bool
	wg      sync.WaitGroup // workers

	stopOnce sync.Once
	stopErr  error

	cmu     sync.Mutex                 // guards cancels
	cancels map[cancelKey]*cancelEntry // running long requests by verb and api.HeaderCancelID
	subs    []*nats.Subscription       // the cancel subjects of the long verbs
}

// cancelKey names a running long request: a cancel on one verb's cancel subject
// never reaches a request of another verb.
type cancelKey struct{ verb, id string }

// cancelEntry is one registered long request; removal compares the pointer, so a
// request only ever removes its own entry.
type cancelEntry struct{ cancel context.CancelFunc }

// register makes cancel reachable by (verb, id) unless that key is taken: the first
// registration wins (a later request with a colliding id, authorized or not, can
// neither replace nor remove it). The returned func removes the entry if it is
// this one; it is never nil.
func (s *served) register(verb, id string, cancel context.CancelFunc) (remove func()) {
	k := cancelKey{verb, id}
	e := &cancelEntry{cancel: cancel}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if _, taken := s.cancels[k]; taken {
		s.log.Debug("cancel id already in use; this request cannot be cancelled by id", "verb", verb)
		return func() {}
	}
	s.cancels[k] = e
	return func() {
		s.cmu.Lock()
		if s.cancels[k] == e {
			delete(s.cancels, k)
		}
		s.cmu.Unlock()
	}
}

// cancelSuffix makes a long verb's subject the subject that cancels its requests.
const cancelSuffix = ".cancel"

// onCancel returns the handler of verb's cancel subject: it cancels the running
// request of that verb named by the message.
func (s *served) onCancel(verb string) nats.MsgHandler {
	return func(m *nats.Msg) {
		s.cmu.Lock()
		e := s.cancels[cancelKey{verb, string(m.Data)}]
		s.cmu.Unlock()
		if e != nil {
			e.cancel()
		}
	}
}

// job is one request for a worker.
type job struct {
	verb string
	req  micro.Request
}

// maxIdleWorkers is how many workers wait for requests between them. A worker's
// stack has grown to what the handlers need: a goroutine per request started small
// and grew its stack three times while decoding and encoding JSON, each time
// copying a deep stack (about 45 µs of CPU per run request of the node, on the
// reply's path, in a profile: runtime.copystack).
const maxIdleWorkers = 8

// maxWorkerRequests retires a worker after that many requests. The race detector's
// state for a goroutine grows with its history: on a worker that never retired,
// the MCP test's grep through a 1M-line block took 1.4–2.2 s under -race instead of
// 1.0 s, enough to trip the controller's 5 s request timeout on a loaded machine.
// A new worker's stack grows once per that many requests.
const maxWorkerRequests = 16

// dispatch returns the micro handler of one verb. It runs on the endpoint's
// subscription goroutine, so it never blocks: it hands the request to an idle
// worker, starts one, or answers at once.
func (s *served) dispatch(verb string) micro.HandlerFunc {
	return func(req micro.Request) {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			s.reject(req, api.CodeUnavailable, "the service %s is stopping", s.name)
			return
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.mu.Unlock()
			s.reject(req, api.CodeBusy, "%s has %d requests in flight; retry later", s.name, MaxInFlight)
			return
		}
		if api.LongVerb(verb) {
			select {
			case s.long <- struct{}{}:
			default:
				<-s.sem
				s.mu.Unlock()
				s.reject(req, api.CodeBusy, "%s has %d long requests (run, wait) in flight; retry later", s.name, MaxLongInFlight)
				return
			}
		}
		select {
		case s.work <- job{verb, req}:
			s.mu.Unlock()
			return
		default:
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.worker(job{verb, req})
	}
}

// worker runs j, then the requests handed to it while it waits, until the service
// stops, enough other workers wait or it has served maxWorkerRequests.
func (s *served) worker(j job) {
	defer s.wg.Done()
	for served := 1; ; served++ {
		s.run(j.verb, j.req)
		if served >= maxWorkerRequests {
			return
		}
		if s.idle.Add(1) > maxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case j = <-s.work:
			s.idle.Add(-1)
		case <-s.ctx.Done():
			s.idle.Add(-1)
			return
		}
	}
}

// run handles one request (holding one of the sem tokens, and of the long ones
// for a long verb).
func (s *served) run(verb string, req micro.Request) {
	defer func() { <-s.sem }()
	if api.LongVerb(verb) {
		defer func() { <-s.long }()
	}
	var reply []byte
	var rerr *api.Error
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("request handler panicked", "subject", req.Subject(), "verb", verb, "panic", r, "stack", string(debug.Stack()))
				reply, rerr = nil, api.Errorf(api.CodeInternal, "internal error handling %s", verb)
			}
		}()
		ctx := s.ctx
		if id := req.Headers().Get(api.HeaderCancelID); id != "" && api.LongVerb(verb) {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(s.ctx)
			remove := s.register(verb, id, cancel)
			defer func() {
				remove()
				cancel()
			}()
		}
		reply, rerr = s.handle(ctx, verb, req.Subject(), flatHeader(req.Headers()), req.Data())
	}()
	var err error
	if rerr != nil {
		err = respondError(req, rerr)
	} else {
		err = req.Respond(reply)
	}
	if err != nil {
		s.logRespondError(req, err)
	}
}

func (s *served) reject(req micro.Request, code, format string, args ...any) {
	if err := respondError(req, api.Errorf(code, format, args...)); err != nil {
		s.logRespondError(req, err)
	}
}

func (s *served) logRespondError(req micro.Request, err error) {
	if req.Reply() == "" {
		s.log.Debug("message without reply subject on a service endpoint", "subject", req.Subject())
		return
	}
	s.log.Warn("cannot send reply", "subject", req.Subject(), "err", err)
}

// stop stops the micro service, cancels the handlers and waits for them.
func (s *served) stop() error {
	s.stopOnce.Do(func() {
		err := s.svc.Stop()
		if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			s.stopErr = fmt.Errorf("transport: stop service %s: %w", s.name, err)
		}
		s.unsubscribe()
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		s.conn.mu.Lock()
		delete(s.conn.services, s.id)
		s.conn.mu.Unlock()
	})
	return s.stopErr
}

// unsubscribe ends the cancel subscriptions.
func (s *served) unsubscribe() {
	for _, sub := range s.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			s.log.Debug("cancel subscription", "subject", sub.Subject, "err", err)
		}
	}
	s.subs = nil
}

// flatHeader keeps the first value of each header (nil when there are none).
func flatHeader(h micro.Headers) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// semver is the pattern the NATS micro framework requires of a service's version
// (https://semver.org's suggested expression).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// ServiceVersion turns a build version into the semver a micro service must carry:
// "v0.2.0" becomes "0.2.0", a version that is no semver ("dev", "") becomes
// "0.0.0-" followed by it (when that is semver) or "0.0.0".
func ServiceVersion(v string) string {
	if t := strings.TrimPrefix(v, "v"); semver.MatchString(t) {
		return t
	}
	if t := "0.0.0-" + v; v != "" && semver.MatchString(t) {
		return t
	}
	return "0.0.0"
}
