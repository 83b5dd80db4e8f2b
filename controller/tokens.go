package controller

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/trust"
)

// API tokens (DESIGN.md, Trust model): every request but /healthz carries one;
// its role must reach the route's least role. Tokens live hashed in a store
// that every controller shares (FLEETMUX_TOKENS) and watches, so a token created
// on one controller works on all, and a revoked one is refused by all at once.

// TokenStore is the shared store of API tokens: keys are token names, values the
// records of package trust (cmd wires transport.KV on the FLEETMUX_TOKENS
// bucket). Implementations are safe for concurrent use.
type TokenStore interface {
	// Create stores value under key; the error wraps api.ErrKeyExists when the key
	// holds a value.
	Create(ctx context.Context, key string, value []byte) error
	// Delete removes key.
	Delete(ctx context.Context, key string) error
	// Watch calls fn with every key's value (nil: deleted), the values held now
	// before it returns, then every change until stop. fn must not block.
	Watch(ctx context.Context, fn func(key string, value []byte)) (stop func(), err error)
}

// caller is who a request acts as, once authenticated: its principal ("token:NAME",
// "ssh:FINGERPRINT") and role. The Fleetmux-Actor header is a label beside it,
// never the principal.
type caller struct{ principal, role string }

type callerKey struct{}

// withCaller returns a context naming the caller; its role (WithRole) is the one
// the node requests made with it are signed with.
func withCaller(ctx context.Context, c caller) context.Context {
	return WithRole(context.WithValue(ctx, callerKey{}, c), c.role)
}

// callerOf is the authenticated caller of ctx (zero when there is none).
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// tokenCache is this controller's copy of the token store, kept by its watch.
type tokenCache struct {
	mu    sync.RWMutex // guards recs, local
	recs  map[string]trust.TokenRecord
	local map[string]caller // by the hash of the token's text (LocalToken)
}

func newTokenCache() *tokenCache {
	return &tokenCache{recs: map[string]trust.TokenRecord{}, local: map[string]caller{}}
}

// apply is the store watch's callback.
func (tc *tokenCache) apply(log func(msg string, args ...any)) func(key string, value []byte) {
	return func(key string, value []byte) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		if value == nil {
			delete(tc.recs, key)
			return
		}
		rec, err := trust.DecodeRecord(key, value)
		if err != nil {
			// No controller writes a record it cannot read back, but whoever may
			// use JetStream's API can make the server answer onto the bucket's
			// subjects: such a value neither adds a token nor revokes one (a
			// revocation is a delete). A key with no good record accepts nothing.
			log("token record ignored: the last readable one stays", "token", key, "err", err)
			return
		}
		tc.recs[key] = rec
	}
}

func (tc *tokenCache) get(name string) (trust.TokenRecord, bool) {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	r, ok := tc.recs[name]
	return r, ok
}

func (tc *tokenCache) put(rec trust.TokenRecord) {
	tc.mu.Lock()
	tc.recs[rec.Name] = rec
	tc.mu.Unlock()
}

func (tc *tokenCache) drop(name string) {
	tc.mu.Lock()
	delete(tc.recs, name)
	tc.mu.Unlock()
}

func (tc *tokenCache) list() []api.Token {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	out := make([]api.Token, 0, len(tc.recs))
	for _, r := range tc.recs {
		out = append(out, r.Token)
	}
	slices.SortFunc(out, func(a, b api.Token) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LocalToken returns a token that only this process knows, acting as principal
// with role until revoke is called: for the front doors that run in the
// controller's process and reach its HTTP API (the SSH verbs act with the SSH
// user's key and role). It is never stored nor shown.
func (c *Controller) LocalToken(principal, role string) (token string, revoke func()) {
	b := make([]byte, 32)
	rand.Read(b)
	token = "fmxl." + base64.RawURLEncoding.EncodeToString(b)
	h := trust.HashToken(token)
	c.tokens.mu.Lock()
	c.tokens.local[h] = caller{principal: principal, role: role}
	c.tokens.mu.Unlock()
	return token, func() {
		c.tokens.mu.Lock()
		delete(c.tokens.local, h)
		c.tokens.mu.Unlock()
	}
}

// errNoToken and errBadToken are what a client sees of a refused token; why it
// was refused goes to the operator's log only.
var (
	errNoToken  = api.Errorf(api.CodeUnauthorized, "missing API token (Authorization: Bearer TOKEN; fleetmux token create makes one)")
	errBadToken = api.Errorf(api.CodeUnauthorized, "wrong, revoked or expired API token")
	// errTokensUnreachable: the token may be in a store not read yet.
	errTokensUnreachable = api.Errorf(api.CodeUnavailable, "the token store (JetStream) is not reachable yet: try again in a moment")
)

// Authenticate finds who a request acts as from its API token (token, the text
// after "Bearer "; "" when it carries none): a stored token (by the name its text
// carries, checked against the hash in constant time, refused once expired or
// revoked), a local token, or the bootstrap token (Config.Token, an admin). It
// returns the principal ("token:NAME") and role, or an *api.Error of code
// unauthorized; why a token was refused goes to the operator's log only, with
// remote, the client's address.
func (c *Controller) Authenticate(token, remote string) (principal, role string, err error) {
	who, aerr := c.authenticate(token, remote)
	if aerr != nil {
		return "", "", aerr
	}
	return who.principal, who.role, nil
}

func (c *Controller) authenticate(text, remote string) (caller, *api.Error) {
	if text == "" {
		return caller{}, errNoToken
	}
	var why error = errors.New("unknown token")
	if name, err := trust.TokenName(text); err == nil {
		if rec, ok := c.tokens.get(name); ok {
			if why = rec.Check(text, time.Now()); why == nil {
				return caller{principal: "token:" + name, role: rec.Role}, nil
			}
			// Not this record's: it may still be the bootstrap token (dev's, named
			// "dev", when someone stored a token of that name too).
		}
	}
	c.tokens.mu.RLock()
	local, ok := c.tokens.local[trust.HashToken(text)]
	c.tokens.mu.RUnlock()
	if ok {
		return local, nil
	}
	if c.cfg.Token != "" && trust.CheckBootstrap(text, c.cfg.Token) == nil {
		// Always token:bootstrap, whatever name its text carries: a stored token may
		// carry the same name (dev's is "dev"), and the audit and the per-principal
		// caps must tell the two apart.
		return caller{principal: "token:" + trust.BootstrapName, role: api.RoleAdmin}, nil
	}
	if c.cfg.Tokens != nil && !c.tokensSynced.Load() {
		// The store has not been read yet: the token may well be in it.
		c.log.Info("API token not checked: the token store is not reachable yet", "remote", remote)
		return caller{}, errTokensUnreachable
	}
	c.log.Info("API token refused", "err", why, "remote", remote)
	return caller{}, errBadToken
}

// WithCaller returns a context in which principal (as Authenticate named it) acts
// with role, labelled actor (a label the client chose, audited beside the
// principal, never trusted; "" keeps ctx's): the node requests made with it are
// signed so.
func (c *Controller) WithCaller(ctx context.Context, actor, principal, role string) context.Context {
	ctx = withCaller(ctx, caller{principal: principal, role: role})
	if actor != "" {
		ctx = WithActor(ctx, actor)
	}
	return ctx
}

// watchTokens fills the token cache from the store and keeps it current until
// Shutdown. It waits up to tokenStartWait for the store; one that does not answer by
// then (JetStream unreachable) is watched from a goroutine that keeps trying,
// and meanwhile only the bootstrap and local tokens are known (others are
// answered unavailable, not refused).
func (c *Controller) watchTokens() error {
	if c.cfg.Tokens == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, tokenStartWait)
	stop, err := c.cfg.Tokens.Watch(ctx, c.tokens.apply(c.log.Warn))
	cancel()
	if err == nil {
		c.tokensSynced.Store(true)
		c.stopTokens = stop
		return nil
	}
	if !errors.Is(err, api.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("controller: token store: %w", err)
	}
	c.log.Warn("token store not reachable: serving with the bootstrap token alone until it is; retrying", "err", err)
	wctx, wcancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	var watchStop func()
	go func() { // owned by the controller: stopTokens waits for it
		defer close(done)
		for wctx.Err() == nil {
			actx, acancel := context.WithTimeout(wctx, tokenWait)
			stop, err := c.cfg.Tokens.Watch(actx, c.tokens.apply(c.log.Warn))
			acancel()
			if err == nil {
				watchStop = stop
				c.tokensSynced.Store(true)
				c.log.Info("token store reachable: every token works again")
				return
			}
			t := time.NewTimer(time.Second)
			select {
			case <-wctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}()
	c.stopTokens = func() {
		wcancel()
		<-done
		if watchStop != nil {
			watchStop()
		}
	}
	return nil
}

// tokenStartWait bounds how long Start waits for the token store; tokenWait
// bounds each later attempt to read it.
const (
	tokenStartWait = 3 * time.Second
	tokenWait      = 5 * time.Second
)

// storeErr is what a caller sees of a store's error: unavailable, with a hint,
// when the store did not answer (the operator's log has the detail).
func (c *Controller) storeErr(what string, err error) error {
	if errors.Is(err, api.ErrUnavailable) {
		c.log.Warn(what+" not reachable", "err", err)
		return api.Errorf(api.CodeUnavailable, "the %s (JetStream) is not reachable now: try again in a moment", what)
	}
	return err
}

// errNoStore answers the token routes of a controller without a token store.
var errNoStore = api.Errorf(api.CodeUnavailable, "this controller has no token store (FLEETMUX_TOKENS): only its bootstrap token works")

// Tokens lists the stored tokens (never their text).
func (c *Controller) Tokens(context.Context) (api.TokenList, error) {
	if c.cfg.Tokens == nil {
		return api.TokenList{}, errNoStore
	}
	return api.TokenList{Tokens: c.tokens.list()}, nil
}

// CreateToken makes a token, stores it, and returns it with its text (shown
// this once). It works on every controller of the store at once.
func (c *Controller) CreateToken(ctx context.Context, req api.TokenRequest) (api.NewToken, error) {
	if c.cfg.Tokens == nil {
		return api.NewToken{}, errNoStore
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return api.NewToken{}, api.Errorf(api.CodeBadRequest, "ttl %q: want a positive duration such as 24h or 90m", req.TTL)
		}
		ttl = d
	}
	if err := trust.ValidTokenName(req.Name); err != nil {
		return api.NewToken{}, api.Errorf(api.CodeBadRequest, "token name: %v", err)
	}
	if !trust.ValidRole(req.Role) {
		return api.NewToken{}, api.Errorf(api.CodeBadRequest, "role %q: want %s", req.Role, strings.Join(api.Roles, ", "))
	}
	text, rec, err := trust.NewToken(req.Name, req.Role, ttl, callerOf(ctx).principal, time.Now())
	if err != nil {
		return api.NewToken{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	b, err := trust.EncodeRecord(rec)
	if err != nil {
		return api.NewToken{}, err
	}
	if err := c.cfg.Tokens.Create(ctx, rec.Name, b); err != nil {
		if errors.Is(err, api.ErrKeyExists) {
			return api.NewToken{}, api.Errorf(api.CodeExists, "a token named %q exists (fleetmux token revoke %s first)", rec.Name, rec.Name)
		}
		return api.NewToken{}, c.storeErr("token store", err)
	}
	c.tokens.put(rec) // usable here at once; the watch brings it to the others
	return api.NewToken{Token: rec.Token, Secret: text}, nil
}

// RevokeToken deletes a token from the store: every controller refuses it from
// the moment its watch sees the deletion.
func (c *Controller) RevokeToken(ctx context.Context, name string) (api.Token, error) {
	if c.cfg.Tokens == nil {
		return api.Token{}, errNoStore
	}
	if err := api.ValidName(name); err != nil {
		return api.Token{}, api.Errorf(api.CodeBadRequest, "token name: %v", err)
	}
	rec, ok := c.tokens.get(name)
	if !ok {
		return api.Token{}, api.Errorf(api.CodeNotFound, "no token named %q (fleetmux token ls lists them)", name)
	}
	if err := c.cfg.Tokens.Delete(ctx, name); err != nil {
		return api.Token{}, c.storeErr("token store", err)
	}
	c.tokens.drop(name)
	return rec.Token, nil
}
