package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// natsJSLine is one line the nats.js subscriber (testdata/natsjs/subscriber.mjs)
// prints: a message, readiness, an error nats.js reported, or its end.
type natsJSLine struct {
	Ready        bool         `json:"ready"`
	Done         bool         `json:"done"`
	Offset       *int         `json:"offset"`
	Data         string       `json:"data"`
	Reply        *string      `json:"reply"`
	SubError     *natsJSError `json:"sub_error"`
	RequestError *natsJSError `json:"request_error"`
}

type natsJSError struct {
	Code              string `json:"code"`
	Message           string `json:"message"`
	PermissionContext *struct {
		Operation string `json:"operation"`
		Subject   string `json:"subject"`
	} `json:"permissionContext"`
}

// natsJS installs testdata/natsjs (the npm package nats, pinned by its
// package-lock.json) into a temporary directory and returns node's path and the
// script's. npm's cache makes a second install take about a second; an npm that
// cannot reach its registry ends the test as Missing (a failure under
// FLEETMUX_TEST_STRICT=1).
func natsJS(t *testing.T) (node, script string) {
	t.Helper()
	node = testutil.NeedTool(t, "node")
	npm := testutil.NeedTool(t, "npm")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "subscriber.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "natsjs", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error",
		"--fetch-retries=1", "--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=2000")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		for _, unreachable := range []string{"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH"} {
			if bytes.Contains(out, []byte(unreachable)) {
				testutil.Missing(t, "the npm registry for the nats package (npm ci: %s)", unreachable)
			}
		}
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return node, filepath.Join(dir, "subscriber.mjs")
}

// TestDevNatsJSSubscriber (issue 14): nats.js, with nothing but
// <data>/creds/subscriber.creds (its creds part, and the CA appended to it for
// TLS) and the subscriber's own inbox prefix, reads a session's output byte for
// byte, Fleetmux-Offset headers in order; subscribing to fleetmux.rpc.> and
// requesting a node's kill are refused as permissions violations, and nothing
// was killed.
func TestDevNatsJSSubscriber(t *testing.T) {
	node, script := natsJS(t)
	addr := startDev(t)
	credsFile, err := filepath.Abs(filepath.Join("data", "creds", "subscriber.creds"))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := os.ReadFile(filepath.Join("data", "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	natsURL := strings.TrimSpace(string(nb))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb testutil.Buffer
	sub := exec.CommandContext(ctx, node, script, natsURL, credsFile, "subscriber", "out", "fleetmux.out.here.s1")
	sub.Stderr = &errb
	stdin, err := sub.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex // guards ready, got, gaps, bad
		ready   bool
		got     []byte
		gaps    int
		bad     []string
		scanned = make(chan struct{})
	)
	go func() { // owned by the test: ends when the subscriber's stdout closes
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l natsJSLine
			err := json.Unmarshal(sc.Bytes(), &l)
			mu.Lock()
			switch {
			case err != nil:
				bad = append(bad, sc.Text())
			case l.Ready:
				ready = true
			case l.Offset != nil:
				data, err := base64.StdEncoding.DecodeString(l.Data)
				if err != nil {
					bad = append(bad, sc.Text())
				}
				if *l.Offset != len(got) {
					gaps++
				}
				got = append(got, data...)
			case l.SubError != nil:
				bad = append(bad, sc.Text())
			}
			mu.Unlock()
		}
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		<-scanned
		if err := sub.Wait(); err != nil {
			t.Errorf("nats.js subscriber: %v\n%s", err, errb.String())
		}
	}
	defer stop()
	testutil.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ready
	}, "the nats.js subscriber to connect and subscribe (stderr: %s)", &errb)

	printBytesAndMatch(t, addr, "the nats.js subscriber", func(want []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Equal(got, want)
	})
	stop()
	mu.Lock()
	if gaps != 0 {
		t.Errorf("%d messages out of offset order", gaps)
	}
	if len(bad) != 0 {
		t.Errorf("unexpected lines from the nats.js subscriber: %q", bad)
	}
	mu.Unlock()

	// The same client may not see or send the nodes' requests.
	var subErr, reqErr *natsJSError
	done := false
	for _, line := range bytes.Split(testutil.RunProgram(t, node, script, natsURL, credsFile, "subscriber", "forbidden", "fleetmux.rpc.>", "fleetmux.rpc.here.kill"), []byte("\n")) {
		var l natsJSLine
		if len(line) == 0 {
			continue
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("nats.js subscriber printed %q: %v", line, err)
		}
		switch {
		case l.Reply != nil:
			t.Fatalf("the subscriber's kill was answered: %q", *l.Reply)
		case l.SubError != nil:
			subErr = l.SubError
		case l.RequestError != nil:
			reqErr = l.RequestError
		case l.Done:
			done = true
		}
	}
	if !done {
		t.Fatal("the nats.js subscriber did not finish")
	}
	check := func(what string, e *natsJSError, op, subject string) {
		t.Helper()
		if e == nil || e.Code != "PERMISSIONS_VIOLATION" || e.PermissionContext == nil ||
			e.PermissionContext.Operation != op || e.PermissionContext.Subject != subject {
			t.Errorf("%s: nats.js reported %+v, want a permissions violation for %s to %q", what, e, op, subject)
		}
	}
	check("subscribe fleetmux.rpc.>", subErr, "subscription", "fleetmux.rpc.>")
	check("request fleetmux.rpc.here.kill", reqErr, "publish", "fleetmux.rpc.here.kill")
	if out, _, err := runArgs(t, "ls", "--addr", addr); err != nil || !strings.Contains(out, "here/s1") {
		t.Fatalf("the session is gone after the subscriber's kill: %q %v", out, err)
	}
}

// natsJSJetStreamLine is one line of subscriber.mjs's jetstream mode.
type natsJSJetStreamLine struct {
	natsJSLine
	Status *struct {
		Type              string `json:"type"`
		Data              string `json:"data"`
		PermissionContext *struct {
			Operation string `json:"operation"`
			Subject   string `json:"subject"`
		} `json:"permissionContext"`
	} `json:"status"`
	JSM *struct {
		Opts  map[string]any `json:"opts"`
		OK    bool           `json:"ok"`
		Error *natsJSError   `json:"error"`
	} `json:"jsm"`
	Ordered *struct {
		Result string       `json:"result"`
		Error  *natsJSError `json:"error"`
	} `json:"ordered"`
}

// TestDevNatsJSJetStream: nats.js replays a session's output from JetStream as
// docs/operations.md shows it: the consumer a controller makes on request
// (fleetmux.consumer.FLEETMUX_OUT.<name>.<filter>), read with nc.jetstream() and
// consumers.get(stream, name), from offset 0. jetstreamManager() is refused its
// JetStream API info ($JS.API.INFO) and works with {checkAPI: false}, the one
// option the docs name; an ordered consumer gets no message, and nats.js says why
// on nc.status(): a permissions violation on $JS.API.CONSUMER.CREATE.
func TestDevNatsJSJetStream(t *testing.T) {
	node, script := natsJS(t)
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	if out, errs, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", "echo from-natsjs"); err != nil {
		t.Fatalf("run: %q %q %v", out, errs, err)
	}
	want := []byte(apiGet(t, addr, "/v1/sessions/here/s1/output?from=0"))
	credsFile, err := filepath.Abs(filepath.Join("data", "creds", "subscriber.creds"))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := os.ReadFile(filepath.Join("data", "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	out := testutil.RunProgram(t, node, script, strings.TrimSpace(string(nb)), credsFile, "subscriber", "jetstream", "fleetmux.out.here.>")
	var reply string
	var first []byte
	firstOff := -1
	jsm := map[bool]*natsJSJetStreamLine{} // by checkAPI: false
	var ordered *natsJSJetStreamLine
	createRefused, done := false, false
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var l natsJSJetStreamLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("nats.js printed %q: %v", line, err)
		}
		switch {
		case l.Reply != nil:
			reply = *l.Reply
		case l.Offset != nil:
			firstOff = *l.Offset
			first, _ = base64.StdEncoding.DecodeString(l.Data)
		case l.JSM != nil:
			jsm[l.JSM.Opts["checkAPI"] == false] = &l
		case l.Ordered != nil:
			ordered = &l
		case l.Status != nil:
			pc := l.Status.PermissionContext
			if l.Status.Data == "PERMISSIONS_VIOLATION" && pc != nil && pc.Operation == "publish" &&
				strings.HasPrefix(pc.Subject, "$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.") {
				createRefused = true
			}
		case l.Done:
			done = true
		}
	}
	if !done {
		t.Fatalf("nats.js did not finish:\n%s", out)
	}
	var rep api.ConsumerReply
	if err := json.Unmarshal([]byte(reply), &rep); err != nil || rep.Name != "subscriber" || rep.Filter != "fleetmux.out.here.>" {
		t.Fatalf("the consumer reply: %q (%v)", reply, err)
	}
	if firstOff != 0 || len(first) == 0 || !bytes.HasPrefix(want, first) {
		t.Fatalf("nats.js pulled %q at offset %d, want the start of %q", first, firstOff, want)
	}
	if l := jsm[false]; l == nil || l.JSM.Error == nil || l.JSM.Error.Code != "PERMISSIONS_VIOLATION" ||
		l.JSM.Error.PermissionContext == nil || l.JSM.Error.PermissionContext.Subject != "$JS.API.INFO" {
		t.Errorf("jetstreamManager(): %+v, want a permissions violation on $JS.API.INFO (the docs say to pass checkAPI: false)", l)
	}
	if l := jsm[true]; l == nil || !l.JSM.OK {
		t.Errorf("jetstreamManager({checkAPI: false}): %+v, want it to work", l)
	}
	if ordered == nil || ordered.Ordered.Result != "timeout" && ordered.Ordered.Error == nil {
		t.Errorf("an ordered consumer: %+v, want no message", ordered)
	}
	if !createRefused {
		t.Errorf("nats.js said nothing of the ordered consumer's refused create on nc.status():\n%s", out)
	}
}
