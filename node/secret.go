package node

import (
	"context"
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
// password): DIR/secrets/NAME, 0600 in a 0700 directory, written by secret_set
// (admin) and typed by the node at a password prompt the policy names (sudo.go).
// No verb returns a value: secret_ls lists names, secret_rm deletes one. A value is
// never logged, never in an audit record, and never leaves the node.

// secretsDir is the directory of the node's secrets.
func (n *Node) secretsDir() string { return filepath.Join(n.cfg.DataDir, "secrets") }

// readSecret reads a stored secret's value.
func (n *Node) readSecret(name string) ([]byte, error) {
	if err := api.ValidName(name); err != nil {
		return nil, err
	}
	if err := datadir.CheckPrivate(filepath.Join(n.secretsDir(), name)); err != nil {
		return nil, err
	}
	return datadir.ReadFile(filepath.Join(n.secretsDir(), name))
}

func (n *Node) secretSet(ctx context.Context, req request) (any, error) {
	var r api.SecretSetRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if err := api.ValidName(r.Name); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "secret name: %v", err)
	}
	if err := api.ValidSecret(r.Value); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "secret %s: %v", r.Name, err)
	}
	if err := datadir.Mkdir(n.secretsDir()); err != nil {
		return nil, err
	}
	if err := datadir.WriteFile(filepath.Join(n.secretsDir(), r.Name), []byte(r.Value), 0o600); err != nil {
		return nil, err
	}
	n.secretsChanged()
	n.log.Info("secret stored", "secret", r.Name, "principal", req.principal)
	return api.SecretInfo{Node: n.cfg.Name, Name: r.Name, UpdatedAt: time.Now().UTC()}, nil
}

func (n *Node) secretList(ctx context.Context, req request) (any, error) {
	out := api.SecretList{Secrets: []api.SecretInfo{}}
	ents, err := os.ReadDir(n.secretsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, d := range ents {
		if !d.Type().IsRegular() || api.ValidName(d.Name()) != nil {
			continue // a temporary file of a write in progress, or not ours
		}
		fi, err := d.Info()
		if err != nil {
			continue
		}
		out.Secrets = append(out.Secrets, api.SecretInfo{Node: n.cfg.Name, Name: d.Name(), UpdatedAt: fi.ModTime().UTC()})
	}
	sort.Slice(out.Secrets, func(i, j int) bool { return out.Secrets[i].Name < out.Secrets[j].Name })
	return out, nil
}

func (n *Node) secretRemove(ctx context.Context, req request) (any, error) {
	var r api.SecretRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if err := api.ValidName(r.Name); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "secret name: %v", err)
	}
	err := os.Remove(filepath.Join(n.secretsDir(), r.Name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, api.Errorf(api.CodeNotFound, "no secret %s on node %s", r.Name, n.cfg.Name)
	}
	if err != nil {
		return nil, err
	}
	n.secretsChanged()
	return api.SecretInfo{Node: n.cfg.Name, Name: r.Name, UpdatedAt: time.Now().UTC()}, nil
}

// secretLits are literal redact patterns of the stored secrets' values, so a value
// that reaches the output anyway (typed where echo was on) is redacted like a
// policy pattern ("[REDACTED:secret-NAME]"). Their Pattern holds the value, quoted:
// never log or send one.
type secretLits struct {
	mu   sync.Mutex                      // serialises rebuilds
	lits atomic.Pointer[[]policy.Redact] // nil or empty: no secret stored
}

// secretsChanged rebuilds the literal patterns from the stored secrets and gives
// every session a redactor with them (followRedaction). A secret it cannot read is
// left out, and logged (by name).
func (n *Node) secretsChanged() {
	n.secretLits.mu.Lock()
	var lits []policy.Redact
	ents, err := os.ReadDir(n.secretsDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.log.Warn("stored secrets not readable: they are not redacted from output", "err", err)
	}
	for _, d := range ents {
		if !d.Type().IsRegular() || api.ValidName(d.Name()) != nil {
			continue
		}
		value, err := n.readSecret(d.Name())
		if err != nil {
			n.log.Warn("stored secret not readable: it is not redacted from output", "secret", d.Name(), "err", err)
			continue
		}
		r, err := policy.NewRedact("secret-"+d.Name(), regexp.QuoteMeta(string(value)))
		clear(value)
		if err != nil {
			n.log.Warn("stored secret not redactable", "secret", d.Name()) // never the error: it quotes the pattern
			continue
		}
		lits = append(lits, r)
	}
	n.secretLits.lits.Store(&lits)
	n.secretLits.mu.Unlock()
	n.followRedaction(nil)
}

// withSecrets is p (nil: no policy) with the stored secrets' literal patterns
// added to its redact patterns: what sessions redact under.
func (n *Node) withSecrets(p *policy.Policy) *policy.Policy {
	lits := n.secretLits.lits.Load()
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
