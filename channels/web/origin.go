package web

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// hostOnly strips the port from a Host header value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// isLoopbackName reports localhost names and loopback IPs.
func isLoopbackName(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed guards against DNS rebinding: a rebinding attacker controls a DNS name, so a
// request is served only when its Host is an IP literal, a localhost name, or a name the
// admin listed.
func hostAllowed(hostport string, allowed []string) bool {
	host := hostOnly(hostport)
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || isLoopbackName(host) {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(host, ".")) {
			return true
		}
	}
	return false
}

// checkOrigin refuses WebSocket upgrades from other sites' pages. Allowed: no Origin (not a
// browser), the page's own origin, and pages served from loopback.
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("origin %q is not a web page origin", trunc(origin, 100))
	}
	if strings.EqualFold(u.Host, r.Host) || isLoopbackName(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("origin %q is not allowed for host %q", trunc(origin, 100), trunc(r.Host, 100))
}
