package guard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/policy"
)

// The node's secrets (DESIGN.md "Guardrails", sudo without handing out the
// password): DIR/secrets/NAME, 0600 in a 0700 directory, written by SetSecret
// (the secret_set verb, admin) and typed at a password prompt the policy names
// (sudo.go). Nothing returns a value: ListSecrets lists names, RemoveSecret
// deletes one. A value is never logged, never in an audit record, and never
// leaves the node.

// secretsDir is the directory of the node's secrets.
func (g *Guard) secretsDir() string { return filepath.Join(g.cfg.DataDir, "secrets") }

// readSecret reads a stored secret's value.
func (g *Guard) readSecret(name string) ([]byte, error) {
	if err := api.ValidName(name); err != nil {
		return nil, err
	}
	if err := datadir.CheckPrivate(filepath.Join(g.secretsDir(), name)); err != nil {
		return nil, err
	}
	return datadir.ReadFile(filepath.Join(g.secretsDir(), name))
}

// SetSecret stores a secret (by is who set it, for the log).
func (g *Guard) SetSecret(r api.SecretSetRequest, by string) (api.SecretInfo, error) {
	if err := api.ValidName(r.Name); err != nil {
		return api.SecretInfo{}, api.Errorf(api.CodeBadRequest, "secret name: %v", err)
	}
	if err := api.ValidSecret(r.Value); err != nil {
		return api.SecretInfo{}, api.Errorf(api.CodeBadRequest, "secret %s: %v", r.Name, err)
	}
	if err := datadir.Mkdir(g.secretsDir()); err != nil {
		return api.SecretInfo{}, err
	}
	if err := datadir.WriteFile(filepath.Join(g.secretsDir(), r.Name), []byte(r.Value), 0o600); err != nil {
		return api.SecretInfo{}, err
	}
	g.SecretsChanged()
	g.log.Info("secret stored", "secret", r.Name, "principal", by)
	return api.SecretInfo{Node: g.cfg.Node, Name: r.Name, UpdatedAt: time.Now().UTC()}, nil
}

// ListSecrets lists the stored secrets' names, sorted.
func (g *Guard) ListSecrets() (api.SecretList, error) {
	out := api.SecretList{Secrets: []api.SecretInfo{}}
	ents, err := os.ReadDir(g.secretsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	for _, d := range ents {
		if !d.Type().IsRegular() || api.ValidName(d.Name()) != nil {
			continue // a temporary file of a write in progress, or not ours
		}
		fi, err := d.Info()
		if err != nil {
			continue
		}
		out.Secrets = append(out.Secrets, api.SecretInfo{Node: g.cfg.Node, Name: d.Name(), UpdatedAt: fi.ModTime().UTC()})
	}
	sort.Slice(out.Secrets, func(i, j int) bool { return out.Secrets[i].Name < out.Secrets[j].Name })
	return out, nil
}

// RemoveSecret deletes a stored secret.
func (g *Guard) RemoveSecret(name string) (api.SecretInfo, error) {
	if err := api.ValidName(name); err != nil {
		return api.SecretInfo{}, api.Errorf(api.CodeBadRequest, "secret name: %v", err)
	}
	err := os.Remove(filepath.Join(g.secretsDir(), name))
	if errors.Is(err, fs.ErrNotExist) {
		return api.SecretInfo{}, api.Errorf(api.CodeNotFound, "no secret %s on node %s", name, g.cfg.Node)
	}
	if err != nil {
		return api.SecretInfo{}, err
	}
	g.SecretsChanged()
	return api.SecretInfo{Node: g.cfg.Node, Name: name, UpdatedAt: time.Now().UTC()}, nil
}

// secretLits are literal redact patterns of the stored secrets' values, so a value
// that reaches the output anyway (typed where echo was on) is redacted like a
// policy pattern ("[REDACTED:secret-NAME]"). Their Pattern holds the value, quoted:
// never log or send one.
type secretLits struct {
	mu   sync.Mutex                      // serialises rebuilds
	lits atomic.Pointer[[]policy.Redact] // nil or empty: no secret stored
}

// SecretsChanged rebuilds the literal patterns from the stored secrets and tells
// the redaction followers (OnRedaction). A secret it cannot read is left out, and
// logged (by name).
func (g *Guard) SecretsChanged() {
	g.secrets.mu.Lock()
	var lits []policy.Redact
	ents, err := os.ReadDir(g.secretsDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		g.log.Warn("stored secrets not readable: they are not redacted from output", "err", err)
	}
	for _, d := range ents {
		if !d.Type().IsRegular() || api.ValidName(d.Name()) != nil {
			continue
		}
		value, err := g.readSecret(d.Name())
		if err != nil {
			g.log.Warn("stored secret not readable: it is not redacted from output", "secret", d.Name(), "err", err)
			continue
		}
		r, err := policy.NewRedact("secret-"+d.Name(), regexp.QuoteMeta(string(value)))
		clear(value)
		if err != nil {
			g.log.Warn("stored secret not redactable", "secret", d.Name()) // never the error: it quotes the pattern
			continue
		}
		lits = append(lits, r)
	}
	g.secrets.lits.Store(&lits)
	g.secrets.mu.Unlock()
	g.redact.changed()
}

// withSecrets is p (nil: no policy) with the stored secrets' literal patterns
// added to its redact patterns: what sessions redact under.
func (g *Guard) withSecrets(p *policy.Policy) *policy.Policy {
	lits := g.secrets.lits.Load()
	if lits == nil || len(*lits) == 0 {
		return p
	}
	q := &policy.Policy{}
	if p != nil {
		*q = *p
	}
	q.Redacts = append(slices.Clip(q.Redacts), *lits...)
	return q
}
