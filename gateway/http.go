package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPOptions configure the gateway's HTTP routes.
type HTTPOptions struct {
	Gatherer prometheus.Gatherer // for /metrics
	// Reload re-reads profiles and hook directories (POST /admin/reload); nil disables it.
	// Its notes tell the admin, in the answer, what the reload did not apply (changes that
	// wait for a restart).
	Reload func() (notes []string, err error)
	// AdminToken, when set, is the bearer token every admin request must carry, from any
	// address; when empty the admin endpoints answer loopback clients only.
	AdminToken string
}

// Handler serves /healthz, /readyz, /metrics, the admin endpoints and every HTTP channel's routes.
func (g *Gateway) Handler(opts HTTPOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if why := g.notReady(r.Context()); why != "" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": why, "channels": g.connState()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "channels": g.connState()})
	})
	if opts.Gatherer != nil {
		// Uncompressed even when the scraper asks for gzip: the page is about 9 KB, and a
		// gzip writer is 0.8 MB, which promhttp keeps pooled between scrapes. Compressed, the
		// first scrape raised private memory by 0.7 MiB more than plain (docs/bench.md).
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{DisableCompression: true}))
	}
	if opts.Reload != nil {
		mux.Handle("POST /admin/reload", adminOnly(opts.AdminToken, func(w http.ResponseWriter, r *http.Request) {
			notes, err := opts.Reload()
			if err != nil {
				writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"status": "kept the previous configuration", "error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, reloaded(notes))
		}))
	}
	g.apiRoutes(mux, opts)
	g.Routes(mux)
	return mux
}

// reloaded is the answer to a reload that was applied: its notes, when any, under "warnings".
func reloaded(notes []string) map[string]any {
	out := map[string]any{"status": "reloaded"}
	if len(notes) > 0 {
		out["warnings"] = notes
	}
	return out
}

func (g *Gateway) connState() map[string]bool {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	out := make(map[string]bool, len(g.conn))
	for k, v := range g.conn {
		out[k] = v
	}
	return out
}

// adminOnly guards an admin endpoint. With a token, a request must carry it as
// "Authorization: Bearer <token>" and may come from anywhere (a gateway in a container is
// administered from outside it). Without one, it admits requests from loopback whose Host is
// a loopback name and which carry no cross-site Origin: a browser page elsewhere cannot reach
// it through DNS rebinding.
func adminOnly(token string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gateway admin"`)
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "the admin endpoint needs Authorization: Bearer <admin.token>"})
				return
			}
			h(w, r)
			return
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil || !isLoopback(host) {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": "the admin endpoint answers loopback clients only (set admin.token to reach it from elsewhere)"})
			return
		}
		reqHost := r.Host
		if h, _, err := net.SplitHostPort(reqHost); err == nil {
			reqHost = h
		}
		if !isLoopback(reqHost) {
			// Said plainly: an admin who curls the machine's own name from the machine
			// itself was told "cross-site" and could not tell what to change.
			writeJSON(w, http.StatusForbidden, map[string]any{"error": fmt.Sprintf(
				"without admin.token the admin endpoint answers only requests addressed to 127.0.0.1, [::1] or localhost, not to %q (a defence against DNS rebinding)", clipHost(reqHost))})
			return
		}
		if r.Header.Get("Origin") != "" {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": "the admin endpoint refuses requests from web pages (cross-site)"})
			return
		}
		h(w, r)
	})
}

// clipHost bounds a Host header quoted back to the client.
func clipHost(h string) string {
	if len(h) > 100 {
		return h[:100] + "..."
	}
	return h
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
