package transport_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEnsureStreams(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	ctx := testutil.Context(t, 20*time.Second)
	for i := range 2 { // idempotent
		if err := transport.EnsureStreams(ctx, c.NC(), "", transport.StreamLimits{}); err != nil {
			t.Fatalf("ensure streams (%d): %v", i+1, err)
		}
	}
	js, err := jetstream.New(c.NC())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		subjects []string
		maxAge   time.Duration
		maxBytes int64
	}{
		api.StreamOut:    {[]string{"fleetmux.out.>"}, 24 * time.Hour, 1 << 30},
		api.StreamEvents: {[]string{"fleetmux.block.>", "fleetmux.event.>", "fleetmux.agent.>"}, 7 * 24 * time.Hour, 256 << 20},
		api.StreamAudit:  {[]string{"fleetmux.audit.>"}, 7 * 24 * time.Hour, 256 << 20},
	}
	names := js.StreamNames(ctx)
	var got []string
	for n := range names.Name() {
		got = append(got, n)
	}
	if names.Err() != nil {
		t.Fatal(names.Err())
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{api.StreamAudit, api.StreamEvents, api.StreamOut}) {
		t.Fatalf("streams %v", got)
	}
	for name, w := range want {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if !slices.Equal(cfg.Subjects, w.subjects) || cfg.MaxAge != w.maxAge || cfg.MaxBytes != w.maxBytes ||
			cfg.Discard != jetstream.DiscardOld || cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s: %+v", name, cfg)
		}
	}
	// A published event lands in its stream.
	if err := c.Publish(api.Subjects{}.Audit("n1"), nil, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		s, err := js.Stream(ctx, api.StreamAudit)
		return err == nil && s.CachedInfo().State.Msgs == 1
	}, "audit record stored")
	if s, err := js.Stream(ctx, api.StreamEvents); err != nil || s.CachedInfo().State.Msgs != 0 {
		t.Fatalf("the events stream holds an audit record: %v", err)
	}

	// Limits can be changed later (update in place).
	if err := transport.EnsureStreams(ctx, c.NC(), "", transport.StreamLimits{OutMaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, api.StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedInfo().Config.MaxAge != time.Hour {
		t.Fatalf("max age not updated: %v", s.CachedInfo().Config.MaxAge)
	}
}

// TestEnsureStreamsMovesAudit: a fleet whose FLEETMUX_EVENTS an older version
// created with the audit subjects gets them moved to FLEETMUX_AUDIT.
func TestEnsureStreamsMovesAudit(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	ctx := testutil.Context(t, 20*time.Second)
	js, _ := jetstream.New(c.NC())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: api.StreamEvents, Subjects: []string{"fleetmux.block.>", "fleetmux.event.>", "fleetmux.audit.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := transport.EnsureStreams(ctx, c.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{api.StreamEvents: {"fleetmux.block.>", "fleetmux.event.>", "fleetmux.agent.>"}, api.StreamAudit: {"fleetmux.audit.>"}} {
		s, err := js.Stream(ctx, name)
		if err != nil || !slices.Equal(s.CachedInfo().Config.Subjects, want) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func TestEnsureStreamsCustomPrefix(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	ctx := testutil.Context(t, 20*time.Second)
	if err := transport.EnsureStreams(ctx, c.NC(), "acme.fm", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(c.NC())
	s, err := js.Stream(ctx, api.StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, []string{"acme.fm.out.>"}) {
		t.Fatalf("subjects %v", got)
	}
	if err := transport.EnsureStreams(ctx, c.NC(), "bad prefix", transport.StreamLimits{}); !errors.Is(err, api.ErrBadName) {
		t.Fatalf("bad prefix: %v", err)
	}
}

func TestEnsureStreamsNoJetStream(t *testing.T) {
	srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopNATS(t, srv) })
	c := connected(t, srv.ClientURL())
	start := time.Now()
	err = transport.EnsureStreams(testutil.Context(t, 20*time.Second), c.NC(), "", transport.StreamLimits{})
	if !errors.Is(err, transport.ErrNoJetStream) {
		t.Fatalf("server without jetstream: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}
