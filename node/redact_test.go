package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/replay"
)

const redactPolicy = `version: 1
rules:
  - name: default
    action: allow
redact:
  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}
`

const (
	fakeKey  = "AKIAIOSFODNN7EXAMPLE"
	splitKey = "AKIAABCDEFGHIJKLMNOP" // printed in two writes, cut after AKIAABCD
	redacted = "[REDACTED:aws-key]"
)

// outFeed follows a node's output stream and block events on a real subscriber.
type outFeed struct {
	collector
	bmu    sync.Mutex // guards blocks
	blocks []api.BlockEvent
}

func (f *fixture) follow(t *testing.T) *outFeed {
	sub, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	o := &outFeed{}
	if _, err := sub.Subscribe(f.subj.Out("n1", "*"), func(m *nats.Msg) {
		off, err := strconv.ParseInt(m.Header.Get(api.HeaderOffset), 10, 64)
		if err == nil {
			o.add(off, m.Data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(f.subj.Block("n1", "*"), func(m *nats.Msg) {
		var be api.BlockEvent
		if json.Unmarshal(m.Data, &be) == nil {
			o.bmu.Lock()
			o.blocks = append(o.blocks, be)
			o.bmu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	return o
}

// contiguous returns the stream's bytes [0, end) when every byte of it came, or nil.
func (o *outFeed) contiguous(end int64) []byte {
	o.collector.mu.Lock()
	defer o.collector.mu.Unlock()
	out := make([]byte, 0, end)
	for pos := int64(0); pos < end; {
		d, ok := o.chunks[pos]
		if !ok {
			return nil
		}
		out = append(out, d...)
		pos += int64(len(d))
	}
	return out[:end]
}

// noKey fails when what has a key in it, or (want) lacks the marker.
func noKey(t *testing.T, where, what string, want bool) {
	t.Helper()
	if strings.Contains(what, fakeKey) || strings.Contains(what, splitKey) || strings.Contains(what, "AKIAABCDEFGH") {
		t.Errorf("%s has the key: %q", where, what)
	}
	if want && !strings.Contains(what, redacted) {
		t.Errorf("%s has no %s: %q", where, redacted, what)
	}
}

// TestRedactEverywhere: with a redact pattern in force, a fake key printed by
// `echo`, and one printed in two writes split inside it, appear nowhere: not in
// the run replies and their blocks, the audit record of the command, the NATS
// stream, block events, read, the screen, the recording (`asciinema cat`); and the
// stream, read and the recording agree byte for byte over the same range.
func TestRedactEverywhere(t *testing.T) {
	shells := []string{"bash"}
	if testutil.WantTool(t, "zsh") != "" {
		shells = append(shells, "zsh")
	}
	for _, shell := range shells {
		t.Run(shell, func(t *testing.T) {
			f, _ := guardFixture(t, redactPolicy, 3)
			_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
			feed := f.follow(t)
			s := f.create(api.CreateRequest{Shell: shell, Argv: nil})

			r := f.run(s.ID, "echo "+fakeKey)
			noKey(t, "run reply", r.Text, true)
			noKey(t, "run block command", r.Block.Command, true)
			rec := testutil.NextAudit(t, audits, "run")
			noKey(t, "audit record", rec.Detail, true)
			r = f.run(s.ID, "printf 'AKIAABCD'; printf 'EFGHIJKLMNOP\\n'")
			if strings.TrimSpace(r.Text) != redacted {
				t.Errorf("split key: run reply %q", r.Text)
			}
			var bl api.BlockResult
			f.mustCall("block", api.BlockRequest{Session: s.ID, N: 1}, &bl)
			noKey(t, "block 1", bl.Text+bl.Block.Command, true)

			var scr api.Screen
			f.mustCall("screen", api.SessionRequest{Session: s.ID}, &scr)
			noKey(t, "screen", scr.Text, true)

			var rd api.ReadReply
			f.mustCall("read", api.ReadRequest{Session: s.ID, From: 0}, &rd)
			noKey(t, "read", string(project(rd.Data)), true)
			if bytes.Count(rd.Data, []byte(redacted)) < 3 {
				t.Errorf("read: %d markers in %q", bytes.Count(rd.Data, []byte(redacted)), rd.Data)
			}
			end := rd.Offset + int64(len(rd.Data))

			var stream []byte
			testutil.Eventually(t, 10*time.Second, func() bool { stream = feed.contiguous(end); return stream != nil },
				"the stream to carry [0, %d)", end)
			if !bytes.Equal(stream, rd.Data) {
				t.Errorf("stream and read differ over [0, %d):\n%q\n%q", end, stream, rd.Data)
			}
			feed.bmu.Lock()
			for _, be := range feed.blocks {
				noKey(t, "block event", be.Block.Command, false)
			}
			nev := len(feed.blocks)
			feed.bmu.Unlock()
			if nev == 0 {
				t.Error("no block events")
			}

			f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
			cast := filepath.Join(f.data, "sessions", s.ID, "output.cast")
			recd, err := replay.Open(cast)
			if err != nil {
				t.Fatal(err)
			}
			defer recd.Close()
			all, err := recd.ReadRange(0, recd.End())
			if err != nil || len(all) < len(rd.Data) || !bytes.Equal(all[:len(rd.Data)], rd.Data) {
				t.Fatalf("recording differs from read over [0, %d) (%v):\n%q\n%q", end, err, all, rd.Data)
			}
			if asc := testutil.WantTool(t, "asciinema"); asc != "" {
				out := testutil.RunAsciinema(t, asc, "cat", exportV2(t, cast))
				if !bytes.Equal(out, all) {
					t.Errorf("asciinema cat (%d bytes) differs from the recording (%d bytes)", len(out), len(all))
				}
				noKey(t, "asciinema cat", string(project(out)), true)
			}
		})
	}
}

// project is roughly what a terminal shows of b: CSI sequences left out (zsh
// redraws a pasted line a character at a time with them in between).
func project(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); i++ {
		if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '[' {
			j := i + 2
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		out = append(out, b[i])
	}
	return out
}

// TestRedactFollowsPolicy: the redactor follows the policy in force, for a session
// that exists already: a key printed before the pattern came stays (its offsets
// were given), after it is redacted, and after a version without it is not.
func TestRedactFollowsPolicy(t *testing.T) {
	f, src := guardFixture(t, markerPolicy, 1)
	s := f.create(api.CreateRequest{Shell: "bash"})
	if r := f.run(s.ID, "echo "+fakeKey); !strings.Contains(r.Text, fakeKey) {
		t.Fatalf("no pattern yet: %q", r.Text)
	}
	src.set(redactPolicy, 2)
	if r := f.run(s.ID, "echo "+fakeKey); strings.TrimSpace(r.Text) != redacted || r.Block.Command != "echo "+redacted {
		t.Errorf("pattern in force: %q (command %q)", r.Text, r.Block.Command)
	}
	src.set(markerPolicy, 3)
	if r := f.run(s.ID, "echo "+fakeKey); strings.TrimSpace(r.Text) != fakeKey {
		t.Errorf("pattern gone: %q", r.Text)
	}
	// A new session under a policy with the pattern starts redacting at once.
	src.set(redactPolicy, 4)
	s2 := f.create(api.CreateRequest{Shell: "bash"})
	if r := f.run(s2.ID, "echo "+fakeKey); strings.TrimSpace(r.Text) != redacted {
		t.Errorf("new session: %q", r.Text)
	}
}

// TestRedactSessionInfo: a session's title, description and label values are
// redacted under the policy in force (and the stored secrets) where they enter the
// node, create and update: a key in a title shows in no reply, list or recording
// header. A title the marker makes longer than its limit is cut to it.
func TestRedactSessionInfo(t *testing.T) {
	f, _ := guardFixture(t, redactPolicy, 3)
	secret := "Fm-title-secret-0123"
	f.mustCall("secret_set", api.SecretSetRequest{Name: "tok", Value: secret}, nil)
	s := f.create(api.CreateRequest{Title: "deploy " + fakeKey, Description: "uses " + secret + "\nand " + fakeKey,
		Labels: map[string]string{"key": fakeKey, "env": "prod"}})
	check := func(where string, in api.Session, title, desc string) {
		t.Helper()
		if in.Title != title || in.Description != desc || in.Labels["key"] != redacted || in.Labels["env"] != "prod" {
			t.Errorf("%s: title %q description %q labels %v", where, in.Title, in.Description, in.Labels)
		}
	}
	title, desc := "deploy "+redacted, "uses [REDACTED:secret-tok]\nand "+redacted
	check("create", s, title, desc)
	var got api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &got)
	check("get", got, title, desc)
	var l api.SessionList
	f.mustCall("list", nil, &l)
	if len(l.Sessions) != 1 {
		t.Fatalf("list: %+v", l)
	}
	check("list", l.Sessions[0], title, desc)
	cast, err := os.ReadFile(filepath.Join(f.data, "sessions", s.ID, "output.cast"))
	if err != nil {
		t.Fatal(err)
	}
	hdr, _, _ := bytes.Cut(cast, []byte("\n"))
	if !bytes.Contains(hdr, []byte(`"title":"deploy `+redacted+`"`)) {
		t.Errorf("the recording's header: %s", hdr)
	}
	for what, b := range map[string][]byte{"the recording": cast, "list": []byte(fmt.Sprint(l))} {
		if bytes.Contains(b, []byte(fakeKey)) || bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds a key or the secret", what)
		}
	}

	// update, and a title at its limit whose marker would make it longer.
	long := strings.Repeat("x", api.MaxTitleBytes-len(secret)) + secret // its marker is a byte longer
	d := "key " + fakeKey
	f.mustCall("update", api.UpdateRequest{Session: s.ID, Title: &long, Description: &d, Labels: map[string]string{"key": "new " + fakeKey}}, &got)
	if len(got.Title) > api.MaxTitleBytes || strings.Contains(got.Title, secret) || !strings.HasSuffix(got.Title, "…") ||
		!strings.HasPrefix(got.Title, strings.Repeat("x", api.MaxTitleBytes-len(secret))+"[REDACTED:") {
		t.Errorf("update: title %q (%d bytes)", got.Title, len(got.Title))
	}
	if got.Description != "key "+redacted || got.Labels["key"] != "new "+redacted {
		t.Errorf("update: description %q labels %v", got.Description, got.Labels)
	}
	f.mustCall("list", nil, &l)
	if strings.Contains(fmt.Sprint(l), fakeKey) {
		t.Errorf("list after update: %+v", l)
	}
}
