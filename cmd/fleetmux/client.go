package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/spf13/cobra"
)

// Environment variables of the client verbs.
const (
	envAddr  = api.EnvAddr
	envToken = api.EnvToken
	// envGossipKey is the gossip key of the server commands.
	envGossipKey = api.EnvGossipKey
)

// clientCmds are the verbs that talk to a controller over its HTTP API.
func clientCmds() []*cobra.Command {
	return []*cobra.Command{
		nodesCmd(), lsCmd(), newCmd(), runVerbCmd(), sendCmd(), keysCmd(), screenCmd(),
		blocksCmd(), blockCmd(), waitCmd(), logsCmd(), attachCmd(), killCmd(), takeOverCmd(),
		approvalsCmd(), approveCmd(), denyCmd(),
	}
}

// clientOptions are the flags every client verb has.
type clientOptions struct {
	addr  string
	token string
	json  bool
	actor string         // hidden --actor: who acts, for the audit
	cmd   *cobra.Command // the verb, for its context (see frontDoor)
	res   *client.Resolved
}

// register adds --addr, --token and (withJSON) --json to c. No default is read from
// the environment here: cobra prints flag defaults in help, and a secret must never
// be one (the environment is read when the verb runs, in resolve).
func (o *clientOptions) register(c *cobra.Command, withJSON bool) {
	o.cmd = c
	f := c.Flags()
	f.StringVar(&o.addr, "addr", "", "controller HTTP API address (default $"+envAddr+", else "+client.DefaultAddr+")")
	f.StringVar(&o.token, "token", "", "API token (default $"+envToken+", else fleetmux dev's; prefer the environment: flags show in ps)")
	f.StringVar(&o.actor, "actor", "", "who acts, for the audit")
	f.MarkHidden("actor")
	if withJSON {
		f.BoolVar(&o.json, "json", false, "print the API's JSON reply")
	}
}

// frontDoor is what the SSH front door fixes for the verbs it runs: the
// controller's address, its token and the SSH user's actor. Under a frontDoor a
// verb reads nothing of the controller's process (environment, files, flags for
// these three), so an SSH user never sees it.
type frontDoor struct{ addr, token, actor string }

type frontDoorKey struct{}

func withFrontDoor(ctx context.Context, fd frontDoor) context.Context {
	return context.WithValue(ctx, frontDoorKey{}, fd)
}

// resolve returns the client's config: the front door's address, token and actor
// when it runs one, else client.Resolve's (the flags, the environment, dev.json).
// It records the address in o.addr and how it was found in o.res for fail's
// messages. A token given without an address, and no dev.json, is a usage error.
func (o *clientOptions) resolve() (client.Config, error) {
	if o.cmd != nil {
		if fd, ok := o.cmd.Context().Value(frontDoorKey{}).(frontDoor); ok {
			o.addr = fd.addr
			cfg := client.Config{Addr: fd.addr, Token: fd.token, Actor: fd.actor}
			if tracing.On() { // the verb's requests continue the SSH span's trace
				cfg.HTTPClient = &http.Client{Transport: tracing.Transport(nil)}
			}
			return cfg, nil
		}
	}
	r, err := client.Resolve(o.addr, o.token)
	if err != nil {
		return client.Config{}, usageError("%v", err)
	}
	r.Actor = o.actor
	if u := os.Getenv("USER"); u != "" && r.Actor == "" {
		r.Actor = "cli:" + u
	}
	o.addr, o.res = r.Addr, &r
	return r.Config, nil
}

// client returns a client of the controller (see resolve).
func (o *clientOptions) client() (*client.Client, error) {
	cfg, err := o.resolve()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, usageError("--addr: %v", strings.TrimPrefix(err.Error(), "client: "))
	}
	return c, nil
}

// apiCall is the skeleton of every client verb: it makes the client (a bad --addr
// is a usage error), makes the verb's one API call with do, recording the raw
// reply when --json is set, and reports a failed call as fail does. The verb then
// prints with o.reply.
func apiCall[T any](ctx context.Context, o *clientOptions, do func(context.Context, *client.Client) (T, error)) (v T, raw []byte, err error) {
	cl, err := o.client()
	if err != nil {
		return v, nil, err
	}
	if o.json {
		ctx = client.CaptureReply(ctx, &raw)
	}
	if v, err = do(ctx, cl); err != nil {
		return v, nil, o.fail(err)
	}
	return v, raw, nil
}

// reply prints a verb's reply: the API's JSON, indented, with --json; else what
// text prints (nothing when text is nil).
func (o *clientOptions) reply(w io.Writer, raw []byte, text func(io.Writer) error) error {
	switch {
	case o.json:
		return printJSON(w, raw)
	case text == nil:
		return nil
	}
	return text(w)
}

// fail turns a client error into what the CLI reports: API errors print as
// "CODE: message"; an unreachable controller says how to start one.
func (o *clientOptions) fail(err error) error {
	if err == nil {
		return nil
	}
	var ce *client.Error
	var ee *exitError
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		if h := o.tokenHint(); h != "" {
			return &hintedError{err: err, hint: h}
		}
		return err
	case errors.As(err, &ee), errors.As(err, &ce):
		return err
	case errors.Is(err, syscall.ECONNREFUSED):
		return &exitError{code: exitUnreachable, err: fmt.Errorf("no controller at %s (connection refused): is `fleetmux dev` running? (set --addr or %s)", o.addr, envAddr)}
	case errors.Is(err, context.Canceled):
		return &exitError{code: 130, err: errors.New("interrupted")}
	}
	return &exitError{code: exitUnreachable, err: fmt.Errorf("controller at %s: %w", o.addr, err)}
}

// exitUnreachable is the exit status of a client verb that got no answer from the
// controller (see the root command's help for the scheme).
const exitUnreachable = 255

// tokenHint says which token went to the controller, or that none did, and where
// one is: dev's in <data>/token (and dev.json), others from `fleetmux token create`.
func (o *clientOptions) tokenHint() string {
	r := o.res
	if r == nil {
		return "" // the SSH front door's
	}
	devToken := "fleetmux dev keeps its admin token in ./.fleetmux/token (<data>/token)"
	devPath, _ := client.DevConfigPath()
	if r.Dev != nil && r.Dev.Data != "" {
		devToken = "fleetmux dev keeps its admin token in " + filepath.Join(r.Dev.Data, "token")
	}
	switch {
	case r.Token == "" && r.Dev != nil:
		return fmt.Sprintf("no API token was sent to %s: it is not fleetmux dev's address (%s, from %s), whose token is used by itself. "+
			"For this controller set $%s to one of its tokens (an admin makes one: fleetmux token create --name NAME --role operator); %s",
			r.Addr, r.Dev.Addr, devPath, envToken, devToken)
	case r.Token == "":
		return fmt.Sprintf("no API token was sent to %s: set $%s (%s; an admin of another controller makes one: fleetmux token create --name NAME --role operator)",
			r.Addr, envToken, devToken)
	case r.DevToken:
		return fmt.Sprintf("%s refused fleetmux dev's token from %s: is it still the dev that wrote it? (starting fleetmux dev again rewrites it)", r.Addr, devPath)
	}
	return fmt.Sprintf("%s refused the token of --token/$%s (expired or revoked? an admin makes a new one: fleetmux token create)", r.Addr, envToken)
}

// hintedError is an error with advice after it; it matches as err does.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() + "\n  " + e.hint }
func (e *hintedError) Unwrap() error { return e.err }

// printJSON prints a raw JSON reply indented.
func printJSON(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		// not JSON after all: print it as it came
		b.Reset()
		b.Write(raw)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	_, err := w.Write(b.Bytes())
	return err
}

// parseAddress parses a session address argument of verb.
func parseAddress(verb, s string) (node, id string, err error) {
	node, id, err = api.ParseAddress(s)
	if err != nil {
		return "", "", usageError("%s: %s", verb, nameErr(err))
	}
	return node, id, nil
}

// nameErr is a name error's message without the "api: bad name: " it wraps.
func nameErr(err error) string {
	return strings.Replace(err.Error(), api.ErrBadName.Error()+": ", "", 1)
}

// needAddress checks that args start with a session address and parses it.
func needAddress(verb string, args []string) (node, id string, err error) {
	if len(args) == 0 || args[0] == "" {
		return "", "", usageError("%s: no session address: want NODE/ID, e.g. web-1/s3 (see fleetmux ls)", verb)
	}
	return parseAddress(verb, args[0])
}

// parseLabels parses repeated --label KEY=VALUE flags (api.ParseLabels).
func parseLabels(kvs []string) (map[string]string, error) {
	labels, err := api.ParseLabels(kvs)
	if err != nil {
		return nil, usageError("--%v", err)
	}
	return labels, nil
}

// parsePairs parses repeated k=v flags into a map.
func parsePairs(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// durationMS converts a --timeout flag to milliseconds.
func durationMS(verb string, d time.Duration) (int, error) {
	if d <= 0 {
		return 0, usageError("%s: --timeout %v: want a positive duration, e.g. 60s", verb, d)
	}
	return int(max(d.Milliseconds(), 1)), nil
}

// labelString is k=v,k=v sorted (printable: see api.Printable), or "-".
func labelString(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return api.Printable(strings.Join(parts, ","))
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeText writes s with a trailing newline when it has none (nothing for "").
func writeText(w io.Writer, s string) error {
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	_, err := io.WriteString(w, s)
	return err
}
