package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestAdminEndpointToken: with admin.token set, the admin endpoint answers a request that
// carries the token from any address and refuses one without it, even from loopback;
// without a token it stays loopback-only.
func TestAdminEndpointToken(t *testing.T) {
	calls := 0
	ok := func(w http.ResponseWriter, r *http.Request) { calls++; w.WriteHeader(http.StatusOK) }
	do := func(h http.Handler, remote, auth string) int {
		req := httptest.NewRequest(http.MethodPost, "http://gateway.example:8080/admin/reload", nil)
		req.RemoteAddr = remote
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	withToken := adminOnly("s3cret-admin-token", ok)
	for _, c := range []struct {
		remote, auth string
		want         int
	}{
		{"203.0.113.9:40000", "Bearer s3cret-admin-token", http.StatusOK},
		{"127.0.0.1:40000", "Bearer s3cret-admin-token", http.StatusOK},
		{"203.0.113.9:40000", "", http.StatusUnauthorized},
		{"127.0.0.1:40000", "", http.StatusUnauthorized},
		{"203.0.113.9:40000", "Bearer s3cret-admin-tokeN", http.StatusUnauthorized},
		{"203.0.113.9:40000", "Basic s3cret-admin-token", http.StatusUnauthorized},
	} {
		if got := do(withToken, c.remote, c.auth); got != c.want {
			t.Errorf("token set, from %s with %q: %d; want %d", c.remote, c.auth, got, c.want)
		}
	}
	if calls != 2 {
		t.Errorf("the endpoint ran %d times; want 2 (only the requests with the token)", calls)
	}
	noToken := adminOnly("", ok)
	if got := do(noToken, "203.0.113.9:40000", "Bearer anything"); got != http.StatusForbidden {
		t.Errorf("no token configured, remote client: %d; want 403", got)
	}
}
