package sshd

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestMatchFrom(t *testing.T) {
	for _, c := range []struct {
		pats string
		addr string
		want bool
	}{
		{"10.9.9.9", "10.9.9.9", true},
		{"10.9.9.9", "127.0.0.1", false},
		{"10.0.0.0/8", "10.200.1.2", true},
		{"10.0.0.0/8", "11.0.0.1", false},
		{"127.0.0.0/8,!10.0.0.0/8", "127.0.0.1", true},
		{"!127.0.0.1,*", "127.0.0.1", false},
		{"!127.0.0.1,*", "127.0.0.2", true},
		{"!10.0.0.0/8", "127.0.0.1", false}, // a negation alone allows nothing
		{"*", "192.0.2.1", true},
		{"192.0.2.*", "192.0.2.77", true},
		{"192.0.2.?", "192.0.2.7", true},
		{"192.0.2.?", "192.0.2.77", false},
		{"192.0.*.1", "192.0.99.1", true},
		{"*.example.com", "192.0.2.1", false}, // no DNS: host names never match
		{"!*.example.com,*", "192.0.2.1", true},
		{"::1", "::1", true},
		{"2001:db8::/32", "2001:db8::5", true},
		{"2001:db8::/32", "2001:db9::5", false},
		{"2001:DB8::*", "2001:db8::5", true},  // case-insensitive
		{"10.9.9.9", "::ffff:10.9.9.9", true}, // IPv4-mapped is the IPv4 address
		{"10.0.0.0/8", "::ffff:10.1.1.1", true},
		{"0.0.0.0/0", "::1", false},
	} {
		got := matchFrom(strings.Split(c.pats, ","), netip.MustParseAddr(c.addr))
		if got != c.want {
			t.Errorf("from=%q, address %s: %v, want %v", c.pats, c.addr, got, c.want)
		}
	}
	if matchFrom([]string{"*"}, netip.Addr{}) {
		t.Error("an address that is not IP matched *")
	}
}

func TestWildcard(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"", "", true}, {"", "a", false}, {"*", "", true}, {"*", "abc", true}, {"a*c", "abbbc", true},
		{"a*c", "abcd", false}, {"a?c", "abc", true}, {"a?c", "ac", false}, {"*b*", "abc", true},
		{"**", "x", true}, {"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXcYb", false},
	} {
		if got := wildcard(c.p, c.s); got != c.want {
			t.Errorf("wildcard(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	for _, c := range []struct {
		v    string
		want time.Time
		bad  bool
	}{
		{v: "20300102", want: time.Date(2030, 1, 2, 0, 0, 0, 0, loc)},
		{v: "203001021530", want: time.Date(2030, 1, 2, 15, 30, 0, 0, loc)},
		{v: "20300102153045", want: time.Date(2030, 1, 2, 15, 30, 45, 0, loc)},
		{v: "20300102Z", want: time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)},
		{v: "20300102153045z", want: time.Date(2030, 1, 2, 15, 30, 45, 0, time.UTC)},
		{v: "2030010", bad: true}, {v: "20301302", bad: true}, {v: "", bad: true}, {v: "2030-01-02", bad: true},
	} {
		got, err := parseExpiry(c.v, loc)
		if c.bad != (err != nil) || !c.bad && !got.Equal(c.want) {
			t.Errorf("parseExpiry(%q) = %v, %v; want %v (bad %v)", c.v, got, err, c.want, c.bad)
		}
	}
}

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		opts string // comma-separated, as ParseAuthorizedKey returns them
		role string
		err  string
	}{
		{opts: "", role: "viewer"},
		{opts: "role=admin", role: "admin"},
		{opts: `role="operator"`, role: "operator"},
		{opts: "ROLE=admin", role: "admin"},
		{opts: "role=root", err: "role"},
		{opts: "role=admin,role=viewer", err: "twice"},
		{opts: `from="10.0.0.0/8"`, role: "viewer"},
		{opts: `from="10.0.0.1/8"`, err: "beyond its mask"},
		{opts: `from="10.0.0.0/33"`, err: "not a CIDR"},
		{opts: `from=""`, err: "empty pattern"},
		{opts: `expiry-time="2030"`, err: "expiry-time"},
		{opts: "cert-authority", role: "viewer"},
		{opts: `principals="a"`, err: "without cert-authority"},
		{opts: "no-port-forwarding,no-agent-forwarding,no-X11-forwarding,no-user-rc", role: "viewer"},
		{opts: `command="/bin/false"`, err: `"command" is not enforced`},
		{opts: "no-pty", err: `"no-pty"`},
		{opts: "restrict", err: `"restrict"`},
		{opts: `environment="A=b"`, err: `"environment"`},
		{opts: "cert-authority=yes", err: `"cert-authority"`},
		{opts: "role", err: `"role"`},
	} {
		var opts []string
		if c.opts != "" {
			opts = strings.Split(c.opts, ",")
		}
		kl, err := parseOptions(opts, "viewer")
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.opts, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.opts, err, c.err)
		case c.err == "" && kl.role != c.role:
			t.Errorf("%s: role %s, want %s", c.opts, kl.role, c.role)
		}
	}
}

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGmvX3Ft8X6rT3zZbEpkQj7T+zfb0DCLaZ6v0zLh7zVg"

func TestParseAuthorized(t *testing.T) {
	data := strings.Join([]string{
		"# comment",
		"",
		"garbage",
		`role=admin ` + testKey + ` me`,
		`command="x" ` + testKey + ` me`,
		`cert-authority,principals="a,b",role=operator ` + testKey + ` ca`,
	}, "\n")
	a, problems := parseAuthorized([]byte(data), "viewer")
	if len(problems) != 2 || problems[0].n != 3 || problems[1].n != 5 {
		t.Errorf("problems %+v, want lines 3 and 5", problems)
	}
	if len(a.keys) != 1 || len(a.cas) != 1 || a.cas[0].role != "operator" || len(a.cas[0].principals) != 2 {
		t.Errorf("parsed %+v", a)
	}
	for _, lines := range a.keys {
		if len(lines) != 1 || lines[0].role != "admin" || lines[0].n != 4 {
			t.Errorf("key lines %+v", lines)
		}
	}
}

// FuzzParseAuthorized: any file parses without a panic, and every line it keeps
// has a valid role and well-formed restrictions.
func FuzzParseAuthorized(f *testing.F) {
	f.Add([]byte(`from="10.0.0.0/8,!10.1.*",expiry-time="20300101Z",role=admin ` + testKey + " me\n"))
	f.Add([]byte(`cert-authority,principals="a",role=operator ` + testKey + "\n# x\n\nbad line\n"))
	f.Add([]byte(`command="a\"b",no-pty ` + testKey))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, _ := parseAuthorized(data, "viewer")
		all := a.cas
		for _, lines := range a.keys {
			all = append(all, lines...)
		}
		for _, kl := range all {
			if !slices.Contains(api.Roles, kl.role) || kl.key == nil || kl.n < 1 {
				t.Fatalf("kept a bad line: %+v", kl)
			}
			matchFrom(kl.from, netip.MustParseAddr("127.0.0.1"))
		}
	})
}

// FuzzMatchFrom: any pattern list against any address, without a panic.
func FuzzMatchFrom(f *testing.F) {
	f.Add("10.0.0.0/8,!10.1.*", []byte{10, 1, 2, 3})
	f.Add("*?*", []byte{127, 0, 0, 1})
	f.Fuzz(func(t *testing.T, pats string, ip []byte) {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		matchFrom(strings.Split(pats, ","), addr)
	})
}
