package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"

	"gateway/channels"
)

// The page cannot set headers on a WebSocket, so it offers the token as a subprotocol next
// to the real one; the server always picks the real one. Only base64url characters follow
// the prefix, which are valid in a Sec-WebSocket-Protocol value whatever the token holds.
const (
	subprotocol   = "gateway.v1"
	tokenProtocol = "gateway.token."
	// statusUnauthorized closes a socket that brought no token or a wrong one. A browser sees
	// only the close code of a socket, never the status of a refused upgrade, so the refusal
	// is a close after the upgrade: the page then asks for the token.
	statusUnauthorized = 4401
	// mediaCookie carries a value derived from the token (never the token) so that <audio>
	// and <img>, which cannot send headers, may load media when a token is required.
	mediaCookie = "gateway_media"
)

// presentedToken returns the token a request brings: a "gateway.token.<base64url>"
// subprotocol (browsers) or an Authorization: Bearer header (other clients).
func presentedToken(r *http.Request) (string, bool) {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			p = strings.TrimSpace(p)
			if enc, ok := strings.CutPrefix(p, tokenProtocol); ok {
				b, err := base64.RawURLEncoding.DecodeString(enc)
				if err != nil {
					return "", true // brought, but not readable: a wrong token
				}
				return string(b), true
			}
		}
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v), true
	}
	return "", false
}

// tokenMatches compares in constant time; hashing first hides the token's length too.
func tokenMatches(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// mediaKey is the media cookie's value: the token cannot be recovered from it.
func (c *Channel) mediaKey() string {
	m := hmac.New(sha256.New, []byte(c.cfg.Token.Reveal()))
	m.Write([]byte("gateway web media v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// setMediaCookie sends the media cookie with the WebSocket upgrade that brought the right
// token, so the page's media elements can load what the chat is sent.
func (c *Channel) setMediaCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: mediaCookie, Value: c.mediaKey(), Path: "/media/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// mediaAllowed reports whether r may load media: always without a token, else with the
// media cookie or the token itself.
func (c *Channel) mediaAllowed(r *http.Request) bool {
	if !c.cfg.Token.IsSet() {
		return true
	}
	if ck, err := r.Cookie(mediaCookie); err == nil {
		want := c.mediaKey()
		if subtle.ConstantTimeCompare([]byte(ck.Value), []byte(want)) == 1 {
			return true
		}
	}
	if tok, ok := presentedToken(r); ok {
		return tokenMatches(tok, c.cfg.Token.Reveal())
	}
	return false
}

// newScrubber scrubs the token from what the channel logs and returns, in every form a
// request carries it: plain (Authorization: Bearer) and base64url (the subprotocol), which
// an error echoing a request header could hold.
func newScrubber(token string) channels.Scrubber {
	return channels.NewScrubber(token, base64.RawURLEncoding.EncodeToString([]byte(token)))
}
