package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func TestSameAddr(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", true},
		{"http://127.0.0.1:7070", "127.0.0.1:7070", true},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070/", true},
		{"http://127.0.0.1:7070", "http://localhost:7070", true},
		{"http://127.0.0.1:7070", "http://LOCALHOST:7070/", true},
		{"http://127.0.0.1:7070", "http://[::1]:7070", true},
		{"http://127.0.0.1:80", "http://localhost", true},
		{"https://example.com", "https://example.com:443/", true},
		{"http://127.0.0.1:7070/fm", "http://127.0.0.1:7070/fm/", true},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7071", false},
		{"http://127.0.0.1:7070", "https://127.0.0.1:7070", false},
		{"http://127.0.0.1:7070", "http://127.0.0.2:7070", false},
		{"http://127.0.0.1:7070", "http://10.0.0.1:7070", false},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070/fm", false},
		{"http://127.0.0.1:7070", "http://localhost.evil.example:7070", false},
		{"http://127.0.0.1:7070", "ftp://127.0.0.1:7070", false},
	} {
		if got := SameAddr(c.a, c.b); got != c.same {
			t.Errorf("SameAddr(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
		if got := SameAddr(c.b, c.a); got != c.same {
			t.Errorf("SameAddr(%q, %q) = %v, want %v", c.b, c.a, got, c.same)
		}
	}
}

// TestResolveRule is the token rule as a table: a token goes only to an address
// the user gave or that dev.json names with it.
func TestResolveRule(t *testing.T) {
	dev := &DevConfig{Addr: "http://127.0.0.1:41234", Token: "devtok"}
	for _, c := range []struct {
		name         string
		addr, token  string
		dev          *DevConfig
		wantAddr     string
		wantToken    string
		wantDevToken bool
		wantErr      error
	}{
		{"nothing, no dev", "", "", nil, DefaultAddr, "", false, nil},
		{"nothing, dev", "", "", dev, dev.Addr, "devtok", true, nil},
		{"dev's address", "http://127.0.0.1:41234", "", dev, dev.Addr, "devtok", true, nil},
		{"dev's address as localhost/", "localhost:41234/", "", dev, dev.Addr, "devtok", true, nil},
		{"another address", "http://127.0.0.1:41235", "", dev, "http://127.0.0.1:41235", "", false, nil},
		{"another host", "http://10.1.2.3:41234", "", dev, "http://10.1.2.3:41234", "", false, nil},
		{"address, no dev", "http://127.0.0.1:41234", "", nil, "http://127.0.0.1:41234", "", false, nil},
		{"token only, dev", "", "mine", dev, dev.Addr, "mine", false, nil},
		{"dev's token only", "", "devtok", dev, dev.Addr, "devtok", true, nil},
		{"token only, no dev", "", "mine", nil, "", "", false, ErrNoAddress},
		{"both", "http://10.1.2.3:7070", "mine", dev, "http://10.1.2.3:7070", "mine", false, nil},
		{"both, dev's address", "http://localhost:41234", "mine", dev, "http://localhost:41234", "mine", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := resolve(c.addr, c.token, c.dev)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if r.Addr != c.wantAddr || r.Token != c.wantToken || r.DevToken != c.wantDevToken {
				t.Errorf("got %q %q dev=%v, want %q %q dev=%v", r.Addr, r.Token, r.DevToken, c.wantAddr, c.wantToken, c.wantDevToken)
			}
		})
	}
}

// listener records the Authorization headers it receives.
type listener struct {
	mu    sync.Mutex
	auths []string
	srv   *httptest.Server
}

func newListener(t *testing.T) *listener {
	l := &listener{}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.auths = append(l.auths, r.Header.Get("Authorization"))
		l.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"nodes":[]}`))
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *listener) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.auths...)
}

// TestResolveNeverLeaksToDefault: a listener on the default address (anyone's, on
// a shared machine) never receives a token the user meant for another controller,
// whether or not dev.json exists; dev.json's address gets it instead.
func TestResolveNeverLeaksToDefault(t *testing.T) {
	squatter := newListener(t)
	old := defaultAddr
	defaultAddr = squatter.srv.URL
	t.Cleanup(func() { defaultAddr = old })
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(api.EnvAddr, "")
	t.Setenv(api.EnvToken, "secret-for-prod")

	call := func() error {
		r, err := Resolve("", "")
		if err != nil {
			return err
		}
		c, err := New(r.Config)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Nodes(context.Background())
		return err
	}
	// No dev.json: refused, nothing sent.
	if err := call(); !errors.Is(err, ErrNoAddress) {
		t.Errorf("a token without an address and no dev.json: %v, want ErrNoAddress", err)
	}
	// dev.json: its address, not the default.
	dev := newListener(t)
	p, _ := DevConfigPath()
	os.MkdirAll(filepath.Dir(p), 0o700)
	b, _ := json.Marshal(DevConfig{Addr: dev.srv.URL, Token: "devtok"})
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	// The default address given by name is the user's choice: the token goes there.
	t.Setenv(api.EnvAddr, squatter.srv.URL)
	t.Setenv(api.EnvToken, "")
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if got := squatter.got(); len(got) != 1 || got[0] != "" {
		t.Errorf("the default address received %q, want one request without a token", got)
	}
	if got := dev.got(); len(got) != 1 || got[0] != "Bearer secret-for-prod" {
		t.Errorf("dev's address received %q", got)
	}
	// A dev.json others may write is not read.
	os.Chmod(p, 0o644)
	if _, ok := ReadDevConfig(); ok {
		t.Error("a dev.json readable by others was used")
	}
	os.Chmod(p, 0o600)
	link := filepath.Join(t.TempDir(), "dev.json")
	os.Rename(p, link)
	os.Symlink(link, p)
	if _, ok := ReadDevConfig(); ok {
		t.Error("a dev.json through a link was used")
	}
}
