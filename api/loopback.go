package api

import (
	"net"
	"strings"
)

// IsLoopbackHost reports whether host (a name or an IP, no port; brackets allowed
// around IPv6) only ever means this machine: "localhost" or a loopback IP. The empty
// host (every interface), unspecified addresses (0.0.0.0, ::) and every other name are
// not loopback. It is the one check behind every "loopback only unless authenticated"
// rule in fleetmux.
func IsLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackAddr is IsLoopbackHost for a host:port address.
func IsLoopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	return err == nil && IsLoopbackHost(host)
}
