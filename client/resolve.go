package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// Where a client's requests go and with which token (DESIGN.md, Trust model). The
// rule, the same for the CLI, `fleetmux mcp` and programs that call Resolve:
//
//  1. The address is --addr, else $FLEETMUX_ADDR; the token is --token, else
//     $FLEETMUX_TOKEN.
//  2. Neither given: dev.json's address and token (the `fleetmux dev` of this
//     user), else the default address with no token.
//  3. An address given and no token: dev.json's token when the address is dev.json's
//     (the same scheme, port and path; localhost, 127.0.0.1 and ::1 are one host),
//     and the request then goes to dev.json's address as written; else no token.
//  4. A token given and no address: dev.json's address when there is a dev.json;
//     else an error. A token never goes to the default address by default: anyone
//     on the machine may listen there.
//  5. Both given: both, as given.
//
// So a token is only ever sent to an address the user named or that dev.json names
// with it.

// DevConfig is what `fleetmux dev` leaves in the user's config (DevConfigPath): its
// HTTP API's address, its admin token and its data directory (where <data>/token
// keeps the same token).
type DevConfig struct {
	Addr  string `json:"addr"`
	Token string `json:"token"`
	Data  string `json:"data,omitempty"`
}

// ErrNoAddress is Resolve's error for a token given without an address when there
// is no dev.json to take the address from.
var ErrNoAddress = errors.New("a token without a controller address")

// maxDevConfigBytes bounds dev.json.
const maxDevConfigBytes = 64 << 10

// DevConfigPath is $XDG_CONFIG_HOME/fleetmux/dev.json (default ~/.config/…).
func DevConfigPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("client: no config dir: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "fleetmux", "dev.json"), nil
}

// ReadDevConfig reads DevConfigPath. ok is false when there is none, or it is not
// the user's alone (a file others may write could point the token elsewhere): a
// link, not a regular file, or readable or writable by group or others.
func ReadDevConfig() (cfg DevConfig, ok bool) {
	p, err := DevConfigPath()
	if err != nil {
		return DevConfig{}, false
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return DevConfig{}, false
	}
	f, err := os.Open(p)
	if err != nil {
		return DevConfig{}, false
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) { // replaced in between
		return DevConfig{}, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDevConfigBytes))
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Addr == "" {
		return DevConfig{}, false
	}
	if _, err := parseAddr(cfg.Addr); err != nil {
		return DevConfig{}, false
	}
	return cfg, true
}

// Resolved is a Config as Resolve made it, and where its parts came from.
type Resolved struct {
	Config
	// DevToken: the token is dev.json's.
	DevToken bool
	// Dev is dev.json, when there was one.
	Dev *DevConfig
}

// Resolve applies the rule above to addr and token (flags; "" when not given), the
// environment and dev.json. Its error wraps ErrNoAddress.
func Resolve(addr, token string) (Resolved, error) {
	if addr == "" {
		addr = os.Getenv(api.EnvAddr)
	}
	if token == "" {
		token = os.Getenv(api.EnvToken)
	}
	var dev *DevConfig
	if dc, ok := ReadDevConfig(); ok {
		dev = &dc
	}
	return resolve(addr, token, dev)
}

// resolve is Resolve's rule on given values.
func resolve(addr, token string, dev *DevConfig) (Resolved, error) {
	r := Resolved{Config: Config{Addr: addr, Token: token}, Dev: dev}
	switch {
	case addr == "" && token == "":
		if dev != nil {
			r.Addr, r.Token, r.DevToken = dev.Addr, dev.Token, true
		} else {
			r.Addr = defaultAddr
		}
	case addr != "" && token == "":
		if dev != nil && SameAddr(addr, dev.Addr) {
			r.Addr, r.Token, r.DevToken = dev.Addr, dev.Token, true
		}
	case addr == "" && token != "":
		if dev == nil {
			return Resolved{}, fmt.Errorf("%w: $%s (or --token) is set but no address is: set $%s or --addr to the controller the token belongs to (it is not sent to the default %s, where anyone on this machine may listen)",
				ErrNoAddress, api.EnvToken, api.EnvAddr, defaultAddr)
		}
		r.Addr = dev.Addr
		r.DevToken = token == dev.Token
	}
	return r, nil
}

// SameAddr reports whether a and b are the same controller address: the same
// scheme, host, port and path, where a missing scheme is http, a missing port the
// scheme's, a trailing slash nothing, and localhost, 127.0.0.1 and ::1 one host.
func SameAddr(a, b string) bool {
	ua, err1 := parseAddr(a)
	ub, err2 := parseAddr(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return ua.Scheme == ub.Scheme && hostKey(ua) == hostKey(ub) && ua.Path == ub.Path
}

// hostKey is u's host and port in one spelling.
func hostKey(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host = strings.TrimSuffix(host, ".")
	if host == "localhost" {
		host = "127.0.0.1"
	} else if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && (ip.To4() == nil || ip.Equal(net.IPv4(127, 0, 0, 1))) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
