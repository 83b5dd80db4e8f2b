package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// service serves verbs echo, block and panic for node n1 and returns the client
// connection, the stop function and the block handler's controls.
type blocker struct {
	entered atomic.Int64  // block handlers running
	release chan struct{} // closed to let them return
	done    atomic.Int64  // block handlers returned
}

func serveTest(t *testing.T) (client *transport.Conn, stop func() error, b *blocker) {
	t.Helper()
	srv := testutil.StartNATS(t, t.TempDir())
	server := connected(t, srv.ClientURL())
	client = connected(t, srv.ClientURL())
	b = &blocker{release: make(chan struct{})}
	subj := api.Subjects{}
	subjects := map[string]string{
		"echo":  subj.RPC("n1", "echo"),
		"block": subj.RPC("n1", "block"),
		"panic": subj.RPC("n1", "panic"),
		"wait":  subj.RPC("n1", "wait"), // a long verb (api.LongVerb) that blocks like block
		"run":   subj.RPC("n1", "run"),  // another long verb
	}
	stop, err := server.Serve(api.ServiceName, "0.1.0", subjects, values(func(ctx context.Context, verb, subject string, header map[string]string, data []byte) []byte {
		switch verb {
		case "echo":
			if subject != subjects[verb] {
				return fmt.Appendf(nil, "echo on subject %q", subject)
			}
			return fmt.Appendf(nil, "%s:%s:%s", verb, header[api.HeaderActor], data)
		case "block", "wait", "run":
			if string(data) == "deny" { // a request the handler refuses at once (not authorized)
				return []byte("denied")
			}
			b.entered.Add(1)
			defer b.done.Add(1)
			select {
			case <-b.release:
				return []byte("released")
			case <-ctx.Done():
				return []byte("cancelled")
			}
		case "panic":
			panic("boom")
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		_ = stop()
	})
	// The service's subscriptions reach the server before any request.
	if err := server.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	return client, stop, b
}

func TestServeRoundTrip(t *testing.T) {
	client, _, _ := serveTest(t)
	got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), map[string]string{api.HeaderActor: "alice"}, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "echo:alice:hi" {
		t.Fatalf("reply %q", got)
	}
	// The micro framework makes the service discoverable.
	info, err := client.Request(testutil.Context(t, 5*time.Second), "$SRV.INFO."+api.ServiceName, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var si micro.Info
	if err := json.Unmarshal(info, &si); err != nil {
		t.Fatal(err)
	}
	if si.Name != api.ServiceName || si.Version != "0.1.0" || len(si.Endpoints) != 5 {
		t.Fatalf("service info %+v", si)
	}
}

func TestServeHandlerPanicIsAnError(t *testing.T) {
	client, _, _ := serveTest(t)
	got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "panic"), nil, nil)
	if code := errorCode(t, err); code != api.CodeInternal {
		t.Fatalf("reply %s", got)
	}
}

func TestServeBlockingHandlerDoesNotBlockOthers(t *testing.T) {
	client, _, b := serveTest(t)
	blocked := make(chan error, 1)
	go func() {
		reply, err := client.Request(context.Background(), api.Subjects{}.RPC("n1", "block"), nil, nil)
		if err == nil && string(reply) != "released" {
			err = fmt.Errorf("reply %q", reply)
		}
		blocked <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return b.entered.Load() == 1 }, "block handler running")
	got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), nil, []byte("x"))
	if err != nil || string(got) != "echo::x" {
		t.Fatalf("echo while another handler blocks: %q %v", got, err)
	}
	close(b.release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
}

func TestServeBusyBeyondMaxInFlight(t *testing.T) {
	client, _, b := serveTest(t)
	var wg sync.WaitGroup
	errs := make(chan error, transport.MaxInFlight)
	for range transport.MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := client.Request(testutil.Context(t, 30*time.Second), api.Subjects{}.RPC("n1", "block"), nil, nil)
			if err == nil && string(reply) != "released" {
				err = fmt.Errorf("reply %q", reply)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return b.entered.Load() == transport.MaxInFlight }, "%d handlers running (now %d)", transport.MaxInFlight, b.entered.Load())
	got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), nil, nil)
	if code := errorCode(t, err); code != api.CodeBusy {
		t.Fatalf("request %d: %s", transport.MaxInFlight+1, got)
	}
	close(b.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Capacity is back.
	got, err = client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), nil, []byte("y"))
	if err != nil || string(got) != "echo::y" {
		t.Fatalf("after release: %q %v", got, err)
	}
}

func TestServeStopCancelsAndWaits(t *testing.T) {
	client, stop, b := serveTest(t)
	replies := make(chan string, 1)
	go func() {
		reply, err := client.Request(testutil.Context(t, 10*time.Second), api.Subjects{}.RPC("n1", "block"), nil, nil)
		if err != nil {
			reply = []byte(err.Error())
		}
		replies <- string(reply)
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return b.entered.Load() == 1 }, "block handler running")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if b.done.Load() != 1 {
		t.Fatal("stop returned before the handler did")
	}
	if r := <-replies; r != "cancelled" {
		t.Fatalf("in-flight request got %q", r)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, err := client.Request(testutil.Context(t, time.Second), api.Subjects{}.RPC("n1", "echo"), nil, nil)
		return errors.Is(err, nats.ErrNoResponders)
	}, "no responders after stop")
}

// TestConnCloseStopsServices: Close stops running services and waits for handlers.
func TestConnCloseStopsServices(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	server := connected(t, srv.ClientURL())
	client := connected(t, srv.ClientURL())
	entered := make(chan struct{})
	var returned atomic.Bool
	_, err := server.Serve(api.ServiceName, "0.1.0", map[string]string{"block": "fleetmux.rpc.n2.block"}, values(func(ctx context.Context, _, _ string, _ map[string]string, _ []byte) []byte {
		close(entered)
		<-ctx.Done()
		returned.Store(true)
		return []byte("bye")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := server.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = client.Request(testutil.Context(t, 5*time.Second), "fleetmux.rpc.n2.block", nil, nil) }()
	<-entered
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if !returned.Load() {
		t.Fatal("Close returned before the handler")
	}
}

// Sequential requests reuse worker goroutines (their stacks have grown), and stop
// ends the idle workers (TestMain checks for leaks).
func TestServeReusesWorkers(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	server := connected(t, srv.ClientURL())
	client := connected(t, srv.ClientURL())
	var mu sync.Mutex
	seen := map[string]int{}
	stop, err := server.Serve(api.ServiceName, "0.1.0", map[string]string{"g": "fleetmux.rpc.n4.g"}, values(func(context.Context, string, string, map[string]string, []byte) []byte {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
		mu.Lock()
		seen[id]++
		mu.Unlock()
		return []byte(id)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := server.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := client.Request(testutil.Context(t, 5*time.Second), "fleetmux.rpc.n4.g", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 8 { // a worker retires after 16 requests
		t.Fatalf("50 sequential requests ran on %d goroutines, want reused workers: %v", len(seen), seen)
	}
}

func TestServeBadConfig(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	h := func(context.Context, string, string, map[string]string, []byte) ([]byte, *api.Error) { return nil, nil }
	if _, err := c.Serve(api.ServiceName, "0.1.0", nil, h); !errors.Is(err, transport.ErrConfig) {
		t.Errorf("no endpoints: %v", err)
	}
	if _, err := c.Serve(api.ServiceName, "0.1.0", map[string]string{"a b": "x.a"}, h); err == nil {
		t.Error("bad verb accepted")
	}
}

// errorCode is the code of err, which must be an *api.Error with a message.
func errorCode(t *testing.T, err error) string {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("not an api error: %v", err)
	}
	if e.Message == "" {
		t.Fatalf("error without message: %+v", e)
	}
	return e.Code
}

// values makes a handler that never fails a ServeFunc.
func values(h func(ctx context.Context, verb, subject string, header map[string]string, data []byte) []byte) transport.ServeFunc {
	return func(ctx context.Context, verb, subject string, header map[string]string, data []byte) ([]byte, *api.Error) {
		return h(ctx, verb, subject, header, data), nil
	}
}

// TestServeVersion: a build version that is no semver ("dev") is served, announced
// as ServiceVersion makes it (micro refuses anything but semver).
func TestServeVersion(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	h := func(context.Context, string, string, map[string]string, []byte) ([]byte, *api.Error) { return nil, nil }
	stop, err := c.Serve(api.ServiceName, "dev", map[string]string{"a": "x.a"}, h)
	if err != nil {
		t.Fatalf("version dev: %v", err)
	}
	defer stop()
	info, err := c.Request(testutil.Context(t, 5*time.Second), "$SRV.INFO."+api.ServiceName, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var si micro.Info
	if err := json.Unmarshal(info, &si); err != nil {
		t.Fatal(err)
	}
	if si.Version != "0.0.0-dev" {
		t.Fatalf("service version %q, want 0.0.0-dev", si.Version)
	}
}

func TestServiceVersion(t *testing.T) {
	for in, want := range map[string]string{
		"0.1.0":             "0.1.0",
		"v0.2.0":            "0.2.0",
		"v1.2.3-rc.1+build": "1.2.3-rc.1+build",
		"v0.1.0-3-gabc123":  "0.1.0-3-gabc123",
		"dev":               "0.0.0-dev",
		"":                  "0.0.0",
		"(devel)":           "0.0.0",
		"1.2":               "0.0.0-1.2",
		"01.2.3":            "0.0.0",
	} {
		if got := transport.ServiceVersion(in); got != want {
			t.Errorf("ServiceVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestServeLongVerbsLeaveRoom is issue 15 #5 at the node's door: requests that
// wait (a viewer's `wait --timeout 10m`, by the hundred) take at most
// MaxLongInFlight workers, and short verbs are still answered.
func TestServeLongVerbsLeaveRoom(t *testing.T) {
	client, _, b := serveTest(t)
	const extra = 20
	var wg sync.WaitGroup
	var busy atomic.Int64
	errs := make(chan error, transport.MaxLongInFlight+extra)
	for range transport.MaxLongInFlight + extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := client.Request(testutil.Context(t, 30*time.Second), api.Subjects{}.RPC("n1", "wait"), nil, nil)
			var aerr *api.Error
			switch {
			case errors.As(err, &aerr) && aerr.Code == api.CodeBusy:
				busy.Add(1)
			case err != nil:
				errs <- err
			case string(reply) == "released":
			default:
				errs <- fmt.Errorf("reply %q", reply)
			}
		}()
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		return b.entered.Load() == transport.MaxLongInFlight && busy.Load() == extra
	}, "%d long handlers running and %d refused busy", transport.MaxLongInFlight, extra)
	for i := range 10 {
		got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), nil, []byte("x"))
		if err != nil || string(got) != "echo::x" {
			t.Fatalf("short request %d while the long ones wait: %q %v", i, got, err)
		}
	}
	close(b.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestServeCancelReachesHandler is the rest of issue 15 #5: a caller that gives up
// on a long request (its client left) ends the handler's wait on the server, so
// the server does not hold it until its timeout.
func TestServeCancelReachesHandler(t *testing.T) {
	client, _, b := serveTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := client.Request(ctx, api.Subjects{}.RPC("n1", "wait"), nil, nil)
		errc <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return b.entered.Load() == 1 }, "the wait handler running")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller's error: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return b.done.Load() == 1 }, "the handler to end when its caller left")
	// A short verb has no cancel subject; a request that ends normally leaves no
	// cancel behind.
	if got, err := client.Request(testutil.Context(t, 5*time.Second), api.Subjects{}.RPC("n1", "echo"), nil, []byte("z")); err != nil || string(got) != "echo::z" {
		t.Fatalf("echo: %q %v", got, err)
	}
}

// TestServeCancelIDCollision: a long request's cancel id belongs to the first
// request that registered it, for its verb only. A second request with the same id
// that the handler refuses at once (as it refuses an unauthorized one) neither
// replaces nor removes it, and a cancel on another verb's subject does not reach it.
// (Before, the refused request overwrote the entry and deleted it on return, so the
// real request could no longer be cancelled.)
func TestServeCancelIDCollision(t *testing.T) {
	client, _, b := serveTest(t)
	nc := client.NC()
	subj := api.Subjects{}
	msg := func(verb, data string) *nats.Msg {
		m := nats.NewMsg(subj.RPC("n1", verb))
		m.Header.Set(api.HeaderCancelID, "id-1")
		m.Data = []byte(data)
		return m
	}
	replies := make(chan string, 1)
	go func() {
		r, err := nc.RequestMsg(msg("wait", "real"), 20*time.Second)
		if err != nil {
			replies <- err.Error()
			return
		}
		replies <- string(r.Data)
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return b.entered.Load() == 1 }, "the real wait running")
	for _, verb := range []string{"wait", "run"} {
		r, err := nc.RequestMsg(msg(verb, "deny"), 5*time.Second)
		if err != nil || string(r.Data) != "denied" {
			t.Fatalf("the colliding %s request: %v %v", verb, r, err)
		}
	}
	// A cancel on run's subject names run's requests, not wait's.
	if err := nc.Publish(subj.RPC("n1", "run")+".cancel", []byte("id-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-replies:
		t.Fatalf("a cancel of another verb ended the wait: %q", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := nc.Publish(subj.RPC("n1", "wait")+".cancel", []byte("id-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-replies:
		if r != "cancelled" {
			t.Fatalf("the real wait replied %q, want cancelled", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel did not reach the real wait: its entry was replaced or removed")
	}
}
