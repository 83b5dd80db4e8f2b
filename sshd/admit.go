package sshd

import (
	"fmt"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
	"golang.org/x/crypto/ssh"
)

// Who gets in, before anyone has logged in. A connection that has not logged in
// costs nothing to open, so those connections are counted apart
// (Config.MaxHandshakes, half of them per address at most), get a short
// deadline (Config.HandshakeTimeout), and, when they are all taken, a new one
// ends the oldest: idle connections cannot keep people with keys out. What they
// write into the audit log is bounded too: the user name they give is cut and
// made printable, and refused logins are recorded at refusalRate at most (the
// others are counted, and the count is recorded).

// bucket is a token bucket: tokens refill over time up to a burst.
type bucket struct {
	tokens float64
	last   time.Time
}

// handshake is a connection that has not logged in yet.
type handshake struct {
	host  string
	start time.Time
}

// refusals limits the audit records of refused logins.
type refusals struct {
	tokens  float64
	last    time.Time
	dropped int // refusals not recorded since the last record
}

const (
	// refusalBurst refused logins are recorded at once, then one per refusalEvery.
	refusalBurst = 20
	refusalEvery = 500 * time.Millisecond
	// maxUntrustedBytes is as much of a name a client gives (user, certificate
	// key id) as the audit records.
	maxUntrustedBytes = 64
)

// admit applies the per-address rate limit and the handshake caps to a new
// connection; "" admits it (it is pending until loggedIn).
func (s *Server) admit(nc net.Conn) string {
	host := hostOnly(nc.RemoteAddr().String())
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "closed"
	}
	b := s.rate[host]
	if b == nil {
		if len(s.rate) > 4096 { // forget idle addresses
			for h, ob := range s.rate {
				if now.Sub(ob.last) > time.Minute {
					delete(s.rate, h)
				}
			}
		}
		b = &bucket{tokens: sshRateBurst, last: now}
		s.rate[host] = b
	}
	b.tokens = min(sshRateBurst, b.tokens+now.Sub(b.last).Seconds()/sshRateEvery.Seconds())
	b.last = now
	if b.tokens < 1 {
		return "rate limited"
	}
	perHost := 0
	var oldest net.Conn
	for pc, h := range s.pending {
		if h.host == host {
			perHost++
		}
		if oldest == nil || h.start.Before(s.pending[oldest].start) {
			oldest = pc
		}
	}
	if perHost >= max(1, s.cfg.MaxHandshakes/2) {
		return "too many handshakes from this address"
	}
	b.tokens--
	if len(s.pending) >= s.cfg.MaxHandshakes {
		// The oldest handshake has had the longest to finish: it gives way.
		delete(s.pending, oldest)
		oldest.Close()
		s.log.Debug("ssh handshake ended for a newer one", "remote", oldest.RemoteAddr().String())
	}
	s.pending[nc] = handshake{host: host, start: now}
	s.conns[nc] = struct{}{}
	return ""
}

// authLog sees every login attempt before the client hears the answer: a
// connection that has logged in stops being a handshake at once, so that no newer
// connection can end it (see admit).
func (s *Server) authLog(meta ssh.ConnMetadata, _ string, err error) {
	if err != nil {
		return
	}
	remote := meta.RemoteAddr().String()
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.pending {
		if nc.RemoteAddr().String() == remote {
			delete(s.pending, nc)
			return
		}
	}
}

// Who stays, once logged in. MaxConns bounds the logged-in connections; within
// it, one key (a certificate: one principal with one key) holds at most
// MaxConnsPerKey, viewers together at most half of MaxConns, and viewers and
// operators together all but an eighth: whatever viewers do, operators and
// admins find room, and admins whatever operators do.

// loggedIn checks that nc, logged in as id, fits under the caps; "" lets it
// stay (counted until forget).
func (s *Server) loggedIn(nc net.Conn, id identity) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, nc)
	total, key, viewers, admins := 0, 0, 0, 0
	for _, other := range s.logged {
		total++
		if other.actor() == id.actor() {
			key++
		}
		switch other.role {
		case api.RoleViewer:
			viewers++
		case api.RoleAdmin:
			admins++
		}
	}
	maxConns := s.cfg.MaxConns
	switch {
	case total >= maxConns:
		return fmt.Sprintf("too many connections (%d)", maxConns)
	case key >= s.cfg.MaxConnsPerKey:
		return fmt.Sprintf("too many connections of this key (%d)", s.cfg.MaxConnsPerKey)
	case id.role == api.RoleViewer && viewers >= max(1, maxConns/2):
		return fmt.Sprintf("too many viewer connections (%d): the rest are kept for operators and admins", max(1, maxConns/2))
	case id.role != api.RoleAdmin && total-admins >= max(1, maxConns-maxConns/8):
		return fmt.Sprintf("too many connections (%d) but for admins", max(1, maxConns-maxConns/8))
	}
	s.logged[nc] = id
	return ""
}

func (s *Server) forget(nc net.Conn) {
	s.mu.Lock()
	delete(s.conns, nc)
	delete(s.pending, nc)
	delete(s.logged, nc)
	s.mu.Unlock()
	nc.Close()
}

// refusal records a refused login, unless refusals come faster than refusalEvery
// (then it is counted, and the count goes with the next record).
func (s *Server) refusal(r api.AuditRecord) {
	now := time.Now()
	s.mu.Lock()
	rf := &s.refused
	if !rf.last.IsZero() {
		rf.tokens = min(refusalBurst, rf.tokens+now.Sub(rf.last).Seconds()/refusalEvery.Seconds())
	}
	rf.last = now
	if rf.tokens < 1 {
		rf.dropped++
		s.mu.Unlock()
		return
	}
	rf.tokens--
	dropped := rf.dropped
	rf.dropped = 0
	s.mu.Unlock()
	if dropped > 0 {
		r.Detail += fmt.Sprintf(" (and %d refused logins before it, not recorded one by one)", dropped)
	}
	s.fleet.Audit(r)
}

// flushRefusals records how many refused logins were not recorded yet.
func (s *Server) flushRefusals() {
	s.mu.Lock()
	dropped := s.refused.dropped
	s.refused.dropped = 0
	s.mu.Unlock()
	if dropped > 0 {
		s.fleet.Audit(api.AuditRecord{Actor: "ssh", Action: "ssh login", Result: "refused",
			Detail: fmt.Sprintf("%d refused logins not recorded one by one", dropped)})
	}
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hostport, "[]")
}

// untrusted is a name an unauthenticated client gave, fit for a record: cut to
// maxUntrustedBytes and printable (api.Printable).
func untrusted(s string) string {
	if len(s) > maxUntrustedBytes {
		cut := maxUntrustedBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return api.Printable(s)
}
