package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/console"
)

// The web console's door (DESIGN.md, Console): its pages at / and /ui/…, sign-in
// with an API token or a one-time link, and the cookie session a sign-in becomes.
//
// A cookie session is a name for the API token it was made from: the server keeps
// the token (never the browser, the page or a URL), and every request with the
// cookie is authenticated with that token exactly like a bearer request
// (authenticate, Fleet.Authenticate), so its principal and role are the token's,
// and revoking the token ends the session's next request and its open streams.
// What a cookie adds, guard checks (checkBrowser): the request comes from the
// console's own origin, and a mutation carries the session's CSRF token.

// Console limits and names.
const (
	// CookieTTL is how long a console sign-in lasts (the token's own expiry and
	// revocation end it sooner).
	CookieTTL = 12 * time.Hour
	// LinkTTL is how long a one-time sign-in link (fleetmux ui) is valid.
	LinkTTL = time.Minute
	// CSRFHeader carries a cookie session's CSRF token on every mutation.
	CSRFHeader = "X-Fleetmux-CSRF"
	// cookieName is the session cookie's name; over TLS it is cookieNameTLS (the
	// __Host- prefix: Secure, no Domain, Path=/).
	cookieName    = "fleetmux_session"
	cookieNameTLS = "__Host-fleetmux_session"
	// maxCookieSessions and maxLinks bound what sign-ins can make the server
	// hold; maxTokenSessions bounds one token's share, so that one token (a
	// viewer's) cannot fill the store and keep everyone else out of the console.
	maxCookieSessions = 4096
	maxTokenSessions  = 32
	maxLinks          = 256
	maxTokenLinks     = 8 // links of one token waiting at once (its oldest gives way)
	maxSignInBytes    = 8 << 10
)

// contentSecurityPolicy is every console page's policy: only the console's own
// scripts, styles and connections (WebSockets included); no inline script or
// style, no framing, no plugins, no base or form target elsewhere. WebAssembly
// (asciinema-player's terminal) may compile; nothing may eval.
const contentSecurityPolicy = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; " +
	"img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'; object-src 'none'"

// cookieSession is one console sign-in.
type cookieSession struct {
	token   string // the API token it acts with
	csrf    string
	expires time.Time
}

// link is a one-time sign-in link's code, waiting to be used.
type link struct {
	token   string
	expires time.Time
}

// consoleStore holds the console's sign-ins and one-time links, by the sha256 of
// their secret (the cookie's value, the link's code). It lives in the
// controller's memory: a restart signs everyone out.
type consoleStore struct {
	now      func() time.Time
	mu       sync.Mutex
	sessions map[[32]byte]*cookieSession
	links    map[[32]byte]link
}

func newConsoleStore() *consoleStore {
	return &consoleStore{now: time.Now, sessions: map[[32]byte]*cookieSession{}, links: map[[32]byte]link{}}
}

// secret returns 32 random bytes as base64url text.
func secret() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// session returns the live cookie session r carries, or nil.
func (c *consoleStore) session(r *http.Request) *cookieSession {
	ck := sessionCookie(r)
	if ck == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := sha256.Sum256([]byte(ck))
	cs := c.sessions[k]
	if cs == nil {
		return nil
	}
	if !c.now().Before(cs.expires) {
		delete(c.sessions, k)
		return nil
	}
	return cs
}

// sessionCookie is the value of r's session cookie ("" when it has none).
func sessionCookie(r *http.Request) string {
	for _, name := range []string{cookieNameTLS, cookieName} {
		if ck, err := r.Cookie(name); err == nil && ck.Value != "" {
			return ck.Value
		}
	}
	return ""
}

// add makes a cookie session for token and returns the cookie's value and it.
func (c *consoleStore) add(token string) (string, *cookieSession, *api.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	// A token at its share gives up its oldest sign-in for the new one.
	var oldest [32]byte
	var oldestAt time.Time
	mine := 0
	for k, cs := range c.sessions {
		if cs.token != token {
			continue
		}
		if mine++; oldestAt.IsZero() || cs.expires.Before(oldestAt) {
			oldest, oldestAt = k, cs.expires
		}
	}
	if mine >= maxTokenSessions {
		delete(c.sessions, oldest)
	}
	if len(c.sessions) >= maxCookieSessions {
		for k, cs := range c.sessions {
			if !now.Before(cs.expires) {
				delete(c.sessions, k)
			}
		}
		if len(c.sessions) >= maxCookieSessions {
			return "", nil, api.Errorf(api.CodeLimit, "%d console sign-ins are open: sign one out first", maxCookieSessions)
		}
	}
	value := secret()
	cs := &cookieSession{token: token, csrf: secret(), expires: now.Add(CookieTTL)}
	c.sessions[sha256.Sum256([]byte(value))] = cs
	return value, cs, nil
}

// remove ends the cookie session r carries.
func (c *consoleStore) remove(r *http.Request) {
	if ck := sessionCookie(r); ck != "" {
		c.mu.Lock()
		delete(c.sessions, sha256.Sum256([]byte(ck)))
		c.mu.Unlock()
	}
}

// newLink makes a one-time link code for token, valid for LinkTTL.
func (c *consoleStore) newLink(token string) (string, time.Time, *api.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, l := range c.links {
		if !now.Before(l.expires) {
			delete(c.links, k)
		}
	}
	var oldest [32]byte
	var oldestAt time.Time
	mine := 0
	for k, l := range c.links {
		if l.token != token {
			continue
		}
		if mine++; oldestAt.IsZero() || l.expires.Before(oldestAt) {
			oldest, oldestAt = k, l.expires
		}
	}
	if mine >= maxTokenLinks {
		delete(c.links, oldest)
	}
	if len(c.links) >= maxLinks {
		return "", time.Time{}, api.Errorf(api.CodeLimit, "%d sign-in links are waiting: try again in a minute", maxLinks)
	}
	code := secret()
	exp := now.Add(LinkTTL)
	c.links[sha256.Sum256([]byte(code))] = link{token: token, expires: exp}
	return code, exp, nil
}

// useLink returns the token of a valid link code and forgets the code (it
// works once).
func (c *consoleStore) useLink(code string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := sha256.Sum256([]byte(code))
	l, ok := c.links[k]
	delete(c.links, k)
	if !ok || !c.now().Before(l.expires) {
		return "", false
	}
	return l.token, true
}

// sameOrigin reports whether r's Origin header names r's own host. A request
// without one is not same-origin: browsers send it on every request that
// matters here (POST, PATCH, DELETE, WebSocket).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
}

// checkBrowser is what a request authenticated by a console cookie must pass
// besides its role: no other site sent it (Sec-Fetch-Site), a mutation or a
// WebSocket comes from the console's own origin, and a mutation carries the
// session's CSRF token.
func checkBrowser(r *http.Request, cs *cookieSession) *api.Error {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return api.Errorf(api.CodeForbidden, "a console request from another site refused")
	}
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead
	ws := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	if (!safe || ws) && !sameOrigin(r) {
		return api.Errorf(api.CodeForbidden, "a console request must come from the console's own origin")
	}
	if !safe && subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(cs.csrf)) != 1 {
		return api.Errorf(api.CodeForbidden, "a console request that changes something needs the %s header", CSRFHeader)
	}
	return nil
}

// setSecurityHeaders sets the headers every reply carries: no sniffing, no
// framing, no referrer.
func setSecurityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// consoleRoot sends / to the console.
func (s *Server) consoleRoot(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// consolePage serves the console's files: an embedded file by its path under
// /ui/, and the console's page (index.html) for every other path without an
// extension (the console's routes). The files hold no data: what a page shows it
// fetches from the API with the session cookie.
func (s *Server) consolePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("path")
	f, ok := console.Lookup(name)
	if !ok {
		if last := name[strings.LastIndexByte(name, '/')+1:]; strings.Contains(last, ".") {
			writeError(w, api.Errorf(api.CodeNotFound, "no console file %s", name))
			return
		}
		f, _ = console.Lookup(console.Index)
	}
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache") // revalidate: the ETag makes that cheap
	h.Set("ETag", f.ETag)
	h.Set("Content-Type", f.Type)
	if match := r.Header.Get("If-None-Match"); match != "" && match == f.ETag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Write(f.Data)
}

// signIn turns an API token, or a one-time link's code, sent as a form field of
// a same-origin POST (never in the URL: guard refuses that), into a cookie
// session, and replies with the caller's principal, role and CSRF token.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("Origin") == "":
		writeError(w, api.Errorf(api.CodeBadRequest, "sign in from the console's page (the request has no Origin)"))
		return
	case !sameOrigin(r) || r.Header.Get("Sec-Fetch-Site") == "cross-site":
		writeError(w, api.Errorf(api.CodeForbidden, "a sign-in from another site refused"))
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/x-www-form-urlencoded" {
		writeError(w, api.Errorf(api.CodeBadRequest, "sign in with a form (application/x-www-form-urlencoded): token=… or code=…"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, api.Errorf(api.CodeBadRequest, "sign-in form: %v", err))
		return
	}
	token, how := r.PostForm.Get("token"), "token"
	if code := r.PostForm.Get("code"); code != "" {
		var ok bool
		if token, ok = s.ui.useLink(code); !ok {
			writeError(w, api.Errorf(api.CodeUnauthorized, "this sign-in link is used, expired or wrong: run fleetmux ui for a new one"))
			return
		}
		how = "one-time link"
	}
	if token == "" {
		writeError(w, api.Errorf(api.CodeBadRequest, "sign in with an API token (token=…) or a one-time link (code=…)"))
		return
	}
	principal, role, err := s.fleet.Authenticate(token, r.RemoteAddr)
	if err != nil {
		ae, ok := err.(*api.Error)
		if !ok {
			ae = api.Errorf(api.CodeUnauthorized, "wrong, revoked or expired API token")
		}
		writeError(w, ae)
		return
	}
	s.ui.remove(r) // a new sign-in replaces the old one
	value, cs, aerr := s.ui.add(token)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	noteAudit(w, func(ar *api.AuditRecord) {
		ar.Principal = principal
		ar.Detail = "console sign-in with " + how + " as " + role
	})
	name := cookieName
	if r.TLS != nil {
		name = cookieNameTLS
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", Expires: cs.expires, MaxAge: int(CookieTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, api.ConsoleMe{Principal: principal, Role: role, CSRF: cs.csrf, ExpiresAt: cs.expires.UTC()})
}

// signOut ends the console sign-in the request carries.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if s.ui.session(r) == nil {
		writeError(w, api.Errorf(api.CodeBadRequest, "not signed in to the console (an API token has nothing to sign out)"))
		return
	}
	s.ui.remove(r)
	for _, name := range []string{cookieName, cookieNameTLS} {
		if _, err := r.Cookie(name); err == nil {
			http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: name == cookieNameTLS, SameSite: http.SameSiteStrictMode})
		}
	}
	noteAudit(w, func(ar *api.AuditRecord) { ar.Detail = "console sign-out" })
	writeJSON(w, http.StatusOK, struct{}{})
}

// me says who the console is signed in as, and the session's CSRF token (which
// only a same-origin page can read: the API sends no CORS headers).
func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r.Context())
	me := api.ConsoleMe{Principal: who.principal, Role: who.role}
	if cs := s.ui.session(r); cs != nil && r.Header.Get("Authorization") == "" {
		me.CSRF, me.ExpiresAt = cs.csrf, cs.expires.UTC()
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, me)
}

// newLink makes a one-time sign-in link (fleetmux ui) for the request's API
// token: a console session made from it acts with that token. Only a bearer
// token makes one: a console session cannot mint links for itself.
func (s *Server) newLink(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		writeError(w, api.Errorf(api.CodeForbidden, "a sign-in link is made with an API token (fleetmux ui), not from the console"))
		return
	}
	code, exp, err := s.ui.newLink(token)
	if err != nil {
		writeError(w, err)
		return
	}
	noteAudit(w, func(ar *api.AuditRecord) { ar.Detail = "one-time console sign-in link" })
	writeJSON(w, http.StatusOK, api.ConsoleLink{Path: "/ui/signin#code=" + code, ExpiresAt: exp.UTC()})
}
