package sshd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"golang.org/x/crypto/ssh"
)

// The SSH front door's authorized_keys file. A line is the OpenSSH format:
// options, key, comment. A key's role comes from the role= option alone (never
// from the comment, which anyone may write as they like), and every option on a
// line is enforced or the line is refused: a key whose line says it may log in
// only from="10.9.9.9" must not log in from anywhere else.
//
// Options fleetmux enforces:
//
//	role=viewer|operator|admin   the key's role (without it: Config.DefaultRole)
//	from="PATTERN,…"             client addresses: IP, CIDR, wildcards * ?, ! negates
//	                             (as OpenSSH with UseDNS no: no DNS lookups)
//	expiry-time="YYYYMMDD[HHMM[SS]][Z]"  the key is refused after it (local time; Z: UTC)
//	cert-authority               the key is a CA: certificates it signs log in
//	principals="a,b"             with cert-authority: the principals it may sign
//	no-port-forwarding, no-agent-forwarding, no-x11-forwarding, no-user-rc
//	                             always true here: fleetmux has none of these
//
// Any other option (command=, no-pty, restrict, environment=, permitopen=, …) asks
// for something fleetmux does not do, so its line is refused and logged with its
// line number (never the key).

// keyLine is one usable line of the file.
type keyLine struct {
	n          int // line number, for logs
	key        ssh.PublicKey
	role       string
	from       []string  // from= patterns; nil: any address
	expiry     time.Time // expiry-time=; zero: none
	ca         bool
	principals []string // with ca: the principals it may sign
}

// authorized is a parsed authorized_keys file.
type authorized struct {
	keys map[string][]keyLine // marshalled key → its lines, in file order
	cas  []keyLine
}

// lineProblem is a line refused, for the operator's log.
type lineProblem struct {
	n   int
	why string
}

// noOpOptions restrict what fleetmux never offers, so they hold by themselves.
var noOpOptions = []string{"no-port-forwarding", "no-agent-forwarding", "no-x11-forwarding", "no-user-rc"}

// parseAuthorized parses an authorized_keys file. Lines it cannot use are left
// out and returned as problems; comments and blank lines are skipped.
func parseAuthorized(data []byte, defaultRole string) (*authorized, []lineProblem) {
	a := &authorized{keys: map[string][]keyLine{}}
	var problems []lineProblem
	for i, raw := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		line := bytes.TrimSpace(raw)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		key, _, opts, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil {
			problems = append(problems, lineProblem{n, "not a key line"})
			continue
		}
		kl, err := parseOptions(opts, defaultRole)
		if err != nil {
			problems = append(problems, lineProblem{n, err.Error()})
			continue
		}
		kl.n, kl.key = n, key
		if kl.ca {
			a.cas = append(a.cas, kl)
			continue
		}
		k := string(key.Marshal())
		a.keys[k] = append(a.keys[k], kl)
	}
	return a, problems
}

// parseOptions reads a line's options; an error refuses the line.
func parseOptions(opts []string, defaultRole string) (keyLine, error) {
	kl := keyLine{role: defaultRole}
	seen := map[string]bool{}
	for _, o := range opts {
		name, value, hasValue := strings.Cut(o, "=")
		name = strings.ToLower(name)
		if seen[name] {
			return kl, fmt.Errorf("option %q given twice", name)
		}
		seen[name] = true
		value = unquoteOption(value)
		switch {
		case name == "role" && hasValue:
			if !slices.Contains(api.Roles, value) {
				return kl, fmt.Errorf("role %q: want viewer, operator or admin", value)
			}
			kl.role = value
		case name == "from" && hasValue:
			pats, err := parseFrom(value)
			if err != nil {
				return kl, err
			}
			kl.from = pats
		case name == "expiry-time" && hasValue:
			t, err := parseExpiry(value, time.Local)
			if err != nil {
				return kl, err
			}
			kl.expiry = t
		case name == "cert-authority" && !hasValue:
			kl.ca = true
		case name == "principals" && hasValue:
			kl.principals = strings.Split(value, ",")
		case slices.Contains(noOpOptions, name) && !hasValue:
		default:
			return kl, fmt.Errorf("option %q is not enforced by fleetmux", name)
		}
	}
	if len(kl.principals) > 0 && !kl.ca {
		return kl, errors.New(`option "principals" without cert-authority`)
	}
	return kl, nil
}

// unquoteOption strips an option value's double quotes (and \" escapes in them).
func unquoteOption(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return strings.ReplaceAll(v[1:len(v)-1], `\"`, `"`)
	}
	return v
}

// parseFrom checks a from= pattern list. A CIDR with bits set beyond its mask is
// an error, as in OpenSSH.
func parseFrom(list string) ([]string, error) {
	pats := strings.Split(list, ",")
	for _, p := range pats {
		p = strings.TrimPrefix(p, "!")
		if p == "" {
			return nil, errors.New("from: an empty pattern")
		}
		if strings.Contains(p, "/") {
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("from: %q is not a CIDR network", p)
			}
			if pfx.Masked() != pfx {
				return nil, fmt.Errorf("from: %q has bits set beyond its mask", p)
			}
		}
	}
	return pats, nil
}

// matchFrom reports whether the client address addr passes a from= pattern list,
// as OpenSSH decides it with UseDNS no (the address stands for the host name): a
// negated pattern that matches refuses, else one that matches allows, else the
// address is refused. A pattern is a CIDR network, an address, or a wildcard
// pattern (* and ?) matched against the address's text, case-insensitively.
func matchFrom(pats []string, addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	addr = addr.Unmap().WithZone("")
	text := addr.String()
	ok := false
	for _, p := range pats {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		var m bool
		if pfx, err := netip.ParsePrefix(p); err == nil {
			m = pfx.Contains(addr)
		} else if a, err := netip.ParseAddr(p); err == nil {
			m = a.Unmap() == addr
		} else {
			m = wildcard(strings.ToLower(p), strings.ToLower(text))
		}
		if m && neg {
			return false
		}
		ok = ok || m
	}
	return ok
}

// wildcard matches s against p, where * is any run of characters and ? one.
func wildcard(p, s string) bool {
	star, mark := -1, 0 // the last * in p, and where in s it began to match
	i, j := 0, 0
	for j < len(s) {
		switch {
		case i < len(p) && p[i] == '*':
			star, mark = i, j
			i++
		case i < len(p) && (p[i] == '?' || p[i] == s[j]):
			i++
			j++
		case star >= 0:
			i = star + 1
			mark++
			j = mark
		default:
			return false
		}
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}

// parseExpiry parses an expiry-time= value: YYYYMMDD, YYYYMMDDHHMM or
// YYYYMMDDHHMMSS, in loc unless it ends in Z (UTC).
func parseExpiry(v string, loc *time.Location) (time.Time, error) {
	s := v
	if strings.HasSuffix(s, "Z") || strings.HasSuffix(s, "z") {
		s, loc = s[:len(s)-1], time.UTC
	}
	layouts := map[int]string{8: "20060102", 12: "200601021504", 14: "20060102150405"}
	layout, ok := layouts[len(s)]
	if !ok {
		return time.Time{}, fmt.Errorf("expiry-time %q: want YYYYMMDD[HHMM[SS]][Z]", v)
	}
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("expiry-time %q: want YYYYMMDD[HHMM[SS]][Z]", v)
	}
	return t, nil
}

// allows checks a line's from= and expiry-time= for a login from addr at now.
func (kl keyLine) allows(addr netip.Addr, now time.Time) error {
	if !kl.expiry.IsZero() && now.After(kl.expiry) {
		return fmt.Errorf("key expired (authorized_keys line %d)", kl.n)
	}
	if kl.from != nil && !matchFrom(kl.from, addr) {
		return fmt.Errorf("key not allowed from %s (authorized_keys line %d)", addr, kl.n)
	}
	return nil
}

// check authenticates key for a login from addr at now: a listed key, or a user
// certificate of a listed CA for one of that CA's principals.
func (a *authorized) check(key ssh.PublicKey, addr netip.Addr, now time.Time) (identity, error) {
	cert, isCert := key.(*ssh.Certificate)
	if !isCert {
		lines, ok := a.keys[string(key.Marshal())]
		if !ok {
			return identity{}, errors.New("unknown key")
		}
		var err error
		for _, kl := range lines { // the first line that allows the login decides
			if err = kl.allows(addr, now); err == nil {
				return identity{fingerprint: ssh.FingerprintSHA256(key), role: kl.role}, nil
			}
		}
		return identity{}, err
	}
	if cert.CertType != ssh.UserCert {
		return identity{}, errors.New("certificate: not a user certificate")
	}
	err := errors.New("certificate from an unknown authority")
	for _, ca := range a.cas {
		if !keysEqual(ca.key, cert.SignatureKey) {
			continue
		}
		if err = ca.allows(addr, now); err != nil {
			continue
		}
		var principal string
		for _, p := range cert.ValidPrincipals {
			if slices.Contains(ca.principals, p) {
				principal = p
				break
			}
		}
		if principal == "" {
			err = errors.New("certificate has no allowed principal")
			continue
		}
		// CheckCert verifies the signature, the validity dates and that no
		// critical option (force-command, source-address: not enforced here) is
		// set.
		checker := &ssh.CertChecker{Clock: func() time.Time { return now }}
		if err = checker.CheckCert(principal, cert); err != nil {
			err = fmt.Errorf("certificate: %w", err)
			continue
		}
		return identity{fingerprint: ssh.FingerprintSHA256(cert.Key), role: ca.role, principal: principal}, nil
	}
	return identity{}, err
}

func keysEqual(a, b ssh.PublicKey) bool { return string(a.Marshal()) == string(b.Marshal()) }

// keyFile reads the authorized_keys file at each login (so edits apply at once),
// parses it again only when its content changed, and logs a refused line once per
// content.
type keyFile struct {
	path        string
	defaultRole string
	logf        func(line int, why string) // reports a refused line

	mu   sync.Mutex // guards data, keys
	data []byte
	keys *authorized
}

// load returns the file's current keys.
func (kf *keyFile) load() (*authorized, error) {
	data, err := os.ReadFile(kf.path)
	if err != nil {
		return nil, err
	}
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if kf.keys != nil && bytes.Equal(data, kf.data) {
		return kf.keys, nil
	}
	keys, problems := parseAuthorized(data, kf.defaultRole)
	for _, p := range problems {
		kf.logf(p.n, p.why)
	}
	kf.data, kf.keys = data, keys
	return keys, nil
}

// remoteAddr is the IP address of a connection's remote end (zero when it is not
// IP, which no from= pattern matches).
func remoteAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
