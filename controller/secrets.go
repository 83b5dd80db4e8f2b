package controller

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
)

// Node secrets (DESIGN.md "Guardrails", sudo without handing out the password): an
// admin stores a secret on one node, which types it at a password prompt the
// policy names. The controller passes the value to that node in the signed request
// and keeps nothing: no reply, log or audit record carries it (the audit records
// the route and the secret's name, in the path).

// SetSecret stores a secret on a node (admin), replacing one of the same name.
func (c *Controller) SetSecret(ctx context.Context, node, name, value string) (info api.SecretInfo, err error) {
	if err := validSecretName(node, name); err != nil {
		return info, err
	}
	if err := api.ValidSecret(value); err != nil {
		return info, api.Errorf(api.CodeBadRequest, "secret %s: %v", name, err)
	}
	err = c.call(ctx, principalOf(ctx), node, "secret_set", api.SecretSetRequest{Name: name, Value: value}, &info, c.cfg.RequestTimeout)
	return info, err
}

// Secrets lists the names of a node's secrets (admin); never a value.
func (c *Controller) Secrets(ctx context.Context, node string) (l api.SecretList, err error) {
	if err := api.ValidName(node); err != nil {
		return l, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	err = c.call(ctx, principalOf(ctx), node, "secret_ls", struct{}{}, &l, c.cfg.RequestTimeout)
	return l, err
}

// DeleteSecret removes a secret from a node (admin).
func (c *Controller) DeleteSecret(ctx context.Context, node, name string) (info api.SecretInfo, err error) {
	if err := validSecretName(node, name); err != nil {
		return info, err
	}
	err = c.call(ctx, principalOf(ctx), node, "secret_rm", api.SecretRequest{Name: name}, &info, c.cfg.RequestTimeout)
	return info, err
}

func validSecretName(node, name string) error {
	if err := api.ValidName(node); err != nil {
		return api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(name); err != nil {
		return api.Errorf(api.CodeBadRequest, "secret name: %v", err)
	}
	return nil
}
