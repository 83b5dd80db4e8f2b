package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/console"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// The web console's door attacked as an outsider would, over real HTTP against
// the real stack: sign-in, the cookie, CSRF from another origin, a cross-site
// WebSocket, a token in a URL, a viewer forging input, and the headers that keep
// the pages' scripts their own. (The browser tests in console/ drive the pages.)

// browserReq is one request as a browser would send it: a cookie, an Origin, a
// CSRF header, a form or JSON body.
type browserReq struct {
	method, path string
	cookie       *http.Cookie
	origin       string // "" sends none
	csrf         string
	form         url.Values
	json         any
	hdr          map[string]string
}

func (f *fixture) browser(b browserReq) (*http.Response, []byte) {
	f.T.Helper()
	var body io.Reader
	ct := ""
	switch {
	case b.form != nil:
		body, ct = strings.NewReader(b.form.Encode()), "application/x-www-form-urlencoded"
	case b.json != nil:
		j, _ := json.Marshal(b.json)
		body, ct = strings.NewReader(string(j)), "application/json"
	}
	req, err := http.NewRequest(b.method, f.Base+b.path, body)
	if err != nil {
		f.T.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	if b.csrf != "" {
		req.Header.Set(httpapi.CSRFHeader, b.csrf)
	}
	for k, v := range b.hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.HTTP.Do(req)
	if err != nil {
		f.T.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// signIn signs in to the console with token and returns the cookie and the CSRF token.
func (f *fixture) signIn(token string) (*http.Cookie, api.ConsoleMe) {
	f.T.Helper()
	resp, data := f.browser(browserReq{method: "POST", path: "/ui/signin", origin: f.Base, form: url.Values{"token": {token}}})
	if resp.StatusCode != http.StatusOK {
		f.T.Fatalf("sign-in: %d %s", resp.StatusCode, data)
	}
	var me api.ConsoleMe
	if err := json.Unmarshal(data, &me); err != nil || me.CSRF == "" {
		f.T.Fatalf("sign-in reply %s: %v", data, err)
	}
	cks := resp.Cookies()
	if len(cks) != 1 {
		f.T.Fatalf("sign-in set %d cookies", len(cks))
	}
	return cks[0], me
}

func TestConsoleSignIn(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true, Config: func(c *controller.Config) { c.AuditFile = audit }})
	viewer := f.newToken("watcher", api.RoleViewer, "")

	ck, me := f.signIn(viewer)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure || ck.Expires.IsZero() || ck.MaxAge <= 0 {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, an expiry (Secure only over TLS)", ck)
	}
	if strings.Contains(ck.Value, viewer) || ck.Value == viewer {
		t.Error("the cookie carries the token")
	}
	if me.Principal != "token:watcher" || me.Role != api.RoleViewer || time.Until(me.ExpiresAt) > httpapi.CookieTTL || time.Until(me.ExpiresAt) < httpapi.CookieTTL-time.Minute {
		t.Errorf("signed in as %+v", me)
	}
	// The cookie is the token's principal and role: it reads, it cannot type.
	if r, b := f.browser(browserReq{method: "GET", path: "/v1/nodes", cookie: ck}); r.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/nodes with the cookie: %d %s", r.StatusCode, b)
	}
	var got api.ConsoleMe
	r, b := f.browser(browserReq{method: "GET", path: "/ui/me", cookie: ck})
	if json.Unmarshal(b, &got); r.StatusCode != http.StatusOK || got.Principal != "token:watcher" || got.CSRF != me.CSRF {
		t.Errorf("GET /ui/me: %d %s", r.StatusCode, b)
	}
	if strings.Contains(string(b), viewer) {
		t.Error("GET /ui/me shows the token")
	}
	s := f.NewSession("n1")
	p := "/v1/sessions/n1/" + s.ID
	if r, b := f.browser(browserReq{method: "POST", path: p + "/input", cookie: ck, origin: f.Base, csrf: me.CSRF, json: api.InputRequest{Data: "x"}}); r.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's cookie typed: %d %s", r.StatusCode, b)
	}

	// Wrong tokens, tokens in the URL, and a form without one are refused; no cookie.
	for name, b := range map[string]browserReq{
		"wrong token":       {method: "POST", path: "/ui/signin", origin: f.Base, form: url.Values{"token": {viewer + "x"}}},
		"token in the URL":  {method: "POST", path: "/ui/signin?token=" + url.QueryEscape(viewer), origin: f.Base, form: url.Values{}},
		"no token":          {method: "POST", path: "/ui/signin", origin: f.Base, form: url.Values{}},
		"JSON, not a form":  {method: "POST", path: "/ui/signin", origin: f.Base, json: map[string]string{"token": viewer}},
		"from another site": {method: "POST", path: "/ui/signin", origin: "http://evil.example", form: url.Values{"token": {viewer}}},
		"no Origin":         {method: "POST", path: "/ui/signin", form: url.Values{"token": {viewer}}},
	} {
		r, body := f.browser(b)
		if r.StatusCode < 400 || len(r.Cookies()) != 0 {
			t.Errorf("sign-in with %s: %d %s, cookies %v", name, r.StatusCode, body, r.Cookies())
		}
	}
	// A token in an API URL is refused, not used.
	for _, q := range []string{"access_token", "token"} {
		if r, b := f.browser(browserReq{method: "GET", path: "/v1/nodes?" + q + "=" + url.QueryEscape(viewer)}); r.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "never goes in a URL") {
			t.Errorf("GET /v1/nodes?%s=TOKEN: %d %s", q, r.StatusCode, b)
		}
	}

	// Sign-out ends the cookie: the same cookie, replayed, is nobody.
	if r, b := f.browser(browserReq{method: "POST", path: "/ui/signout", cookie: ck, origin: f.Base, csrf: me.CSRF}); r.StatusCode != http.StatusOK || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
		t.Errorf("sign-out: %d %s %v", r.StatusCode, b, r.Cookies())
	}
	for _, path := range []string{"/v1/nodes", "/ui/me"} {
		if r, b := f.browser(browserReq{method: "GET", path: path, cookie: ck}); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s after sign-out: %d %s", path, r.StatusCode, b)
		}
	}

	// Revoking the token ends its console sign-ins.
	ck2, _ := f.signIn(viewer)
	f.Must(http.StatusOK, "DELETE", "/v1/tokens/watcher", nil, nil)
	if r, b := f.browser(browserReq{method: "GET", path: "/v1/nodes", cookie: ck2}); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/nodes with the cookie of a revoked token: %d %s", r.StatusCode, b)
	}

	// Every sign-in and sign-out is audited with its principal.
	testutil.Eventually(t, 5*time.Second, func() bool {
		in, out := 0, 0
		for _, rec := range testutil.AuditRecords(t, audit) {
			switch {
			case rec.Action == "POST /ui/signin" && rec.Result == "ok" && rec.Principal == "token:watcher":
				in++
			case rec.Action == "POST /ui/signout" && rec.Result == "ok" && rec.Principal == "token:watcher":
				out++
			}
		}
		return in == 2 && out == 1
	}, "two sign-ins and a sign-out of token:watcher in the audit")
}

// TestConsoleLink: fleetmux ui's one-time link signs a browser in once, as the
// token that made it; a console session cannot make one.
func TestConsoleLink(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	op := f.newToken("person", api.RoleOperator, "")
	var l api.ConsoleLink
	f.as(op, func() { f.Must(http.StatusOK, "POST", "/ui/links", nil, &l) })
	code, ok := strings.CutPrefix(l.Path, "/ui/signin#code=")
	if !ok || len(code) < 40 || time.Until(l.ExpiresAt) > httpapi.LinkTTL {
		t.Fatalf("link %+v", l)
	}
	link := browserReq{method: "POST", path: "/ui/signin", origin: f.Base, form: url.Values{"code": {code}}}
	r, b := f.browser(link)
	var me api.ConsoleMe
	if json.Unmarshal(b, &me); r.StatusCode != http.StatusOK || me.Principal != "token:person" || me.Role != api.RoleOperator || len(r.Cookies()) != 1 {
		t.Fatalf("sign-in with the link: %d %s", r.StatusCode, b)
	}
	if r, b := f.browser(link); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Errorf("the link used twice: %d %s", r.StatusCode, b)
	}
	// A cookie cannot mint links (the CSRF header and Origin are right: still no).
	if r, b := f.browser(browserReq{method: "POST", path: "/ui/links", cookie: r.Cookies()[0], origin: f.Base, csrf: me.CSRF}); r.StatusCode != http.StatusForbidden {
		t.Errorf("a console session made a link: %d %s", r.StatusCode, b)
	}
}

// TestConsoleCSRF: a mutation with the cookie needs the console's own Origin and
// the session's CSRF token; another site's page has neither.
func TestConsoleCSRF(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	ck, me := f.signIn(f.Token)
	create := api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Title: "csrf"}}
	for name, b := range map[string]browserReq{
		"no CSRF header":           {origin: f.Base},
		"a wrong CSRF header":      {origin: f.Base, csrf: me.CSRF + "x"},
		"another origin":           {origin: "http://evil.example", csrf: me.CSRF},
		"no Origin":                {csrf: me.CSRF},
		"a cross-site fetch":       {origin: f.Base, csrf: me.CSRF, hdr: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"a null origin (sandbox)":  {origin: "null", csrf: me.CSRF},
		"the origin's host, other": {origin: "http://127.0.0.1.evil.example", csrf: me.CSRF},
	} {
		b.method, b.path, b.cookie, b.json = "POST", "/v1/sessions", ck, create
		if r, body := f.browser(b); r.StatusCode != http.StatusForbidden {
			t.Errorf("POST /v1/sessions with the cookie and %s: %d %s", name, r.StatusCode, body)
		}
	}
	var list api.SessionList
	f.Must(http.StatusOK, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("a refused request made a session: %+v", list.Sessions)
	}
	// The console's own request passes.
	if r, b := f.browser(browserReq{method: "POST", path: "/v1/sessions", cookie: ck, origin: f.Base, csrf: me.CSRF, json: create}); r.StatusCode != http.StatusCreated {
		t.Errorf("the console's own POST: %d %s", r.StatusCode, b)
	}
}

// TestConsoleWebSocket: an attach with the cookie opens only from the console's
// own origin; a viewer's forged keystrokes and resizes reach nothing.
func TestConsoleWebSocket(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	viewer := f.newToken("watcher", api.RoleViewer, "")
	s := f.NewSession("n1")
	wsURL := "ws" + strings.TrimPrefix(f.Base, "http") + "/v1/sessions/n1/" + s.ID + "/attach"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(ck *http.Cookie, origin string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{}
		h.Set("Cookie", ck.String())
		if origin != "" {
			h.Set("Origin", origin)
		}
		return websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
	}
	admin, _ := f.signIn(f.Token)
	for name, origin := range map[string]string{"another site": "http://evil.example", "no Origin": ""} {
		c, resp, err := dial(admin, origin)
		if err == nil {
			c.CloseNow()
			t.Errorf("attach with the cookie from %s opened", name)
		} else if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("attach with the cookie from %s: %v %v", name, resp, err)
		}
	}

	vck, _ := f.signIn(viewer)
	c, _, err := dial(vck, f.Base)
	if err != nil {
		t.Fatalf("a viewer's attach from the console: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("echo forged-$((6*7))\r")); err != nil {
		t.Fatal(err)
	}
	var refused bool
	for !refused {
		typ, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("the viewer's attach ended without saying why: %v", err)
		}
		var m api.AttachMsg
		if typ == websocket.MessageText && json.Unmarshal(data, &m) == nil && m.Type == api.AttachError {
			if m.Error == nil || m.Error.Code != api.CodeForbidden {
				t.Fatalf("the viewer's input: %s", data)
			}
			refused = true
		}
	}
	f.Run("n1", s.ID, "true")
	var scr api.Screen
	f.Must(http.StatusOK, "GET", "/v1/sessions/n1/"+s.ID+"/screen", nil, &scr)
	if strings.Contains(scr.Text, "forged-42") || strings.Contains(scr.Text, "forged-") {
		t.Errorf("a viewer's keystrokes reached the session:\n%s", scr.Text)
	}
}

// TestConsolePages: the console's files are served with a strict policy (no
// inline script or style, no framing, no sniffing), carry no inline script or
// style themselves, and hold no data; / leads to them.
func TestConsolePages(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	f.Token = ""
	for _, path := range []string{"/ui/", "/ui/sessions/n1/s1", "/ui/app.js", "/ui/vendor/xterm/xterm.mjs"} {
		r, b := f.browser(browserReq{method: "GET", path: path})
		h := r.Header
		csp := h.Get("Content-Security-Policy")
		if r.StatusCode != http.StatusOK || len(b) == 0 {
			t.Errorf("GET %s: %d", path, r.StatusCode)
		}
		for _, want := range []string{"script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "default-src 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: policy %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "'unsafe-eval'") {
			t.Errorf("GET %s: policy %q allows inline or eval", path, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, h)
		}
		if strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".mjs") {
			if !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") {
				t.Errorf("GET %s: type %s", path, h.Get("Content-Type"))
			}
		} else if !strings.Contains(string(b), `<script type="module" src="/ui/app.js">`) {
			t.Errorf("GET %s is not the console's page", path)
		}
		if r2, _ := f.browser(browserReq{method: "GET", path: path, hdr: map[string]string{"If-None-Match": h.Get("ETag")}}); r2.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d", path, r2.StatusCode)
		}
	}
	if r, _ := f.browser(browserReq{method: "GET", path: "/ui/nope.js"}); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d", r.StatusCode)
	}
	f.HTTP.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if r, _ := f.browser(browserReq{method: "GET", path: "/"}); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d %s", r.StatusCode, r.Header.Get("Location"))
	}
	// The console's own markup: no inline script, no inline style, no handler attribute.
	inline := regexp.MustCompile(`(?i)<script(?:[^>]*)>\s*[^<\s]|<style|\sstyle\s*=|\son[a-z]+\s*=|javascript:`)
	var names []string
	fs.WalkDir(console.Files(), ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(name, "vendor/") {
			names = append(names, name)
		}
		return err
	})
	if len(names) < 8 {
		t.Fatalf("the console's own files: %v", names)
	}
	for _, name := range names {
		file, _ := console.Lookup(name)
		if strings.HasSuffix(name, ".html") && inline.Match(file.Data) {
			t.Errorf("%s has inline script or style: %s", name, inline.Find(file.Data))
		}
		if strings.Contains(string(file.Data), "innerHTML") || strings.Contains(string(file.Data), "localStorage") {
			t.Errorf("%s uses innerHTML or localStorage", name)
		}
	}
}

// TestConsoleTLSCookie: over TLS the cookie is Secure, with the __Host- prefix.
func TestConsoleTLSCookie(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	srv := httptest.NewTLSServer(f.API.Handler())
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/ui/signin", strings.NewReader(url.Values{"token": {f.Token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cks := resp.Cookies()
	if resp.StatusCode != http.StatusOK || len(cks) != 1 || cks[0].Name != "__Host-fleetmux_session" || !cks[0].Secure || !cks[0].HttpOnly || cks[0].Path != "/" || cks[0].Domain != "" {
		t.Fatalf("sign-in over TLS: %d %+v", resp.StatusCode, cks)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/ui/me", nil)
	req.AddCookie(cks[0])
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ui/me with the TLS cookie: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
