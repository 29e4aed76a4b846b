// Package secret holds tokens and API keys so that they cannot leak by accident:
// every way Go prints or encodes a value shows "<redacted>" instead of the secret.
package secret

import "log/slog"

// Redacted is what a non-empty secret prints as.
const Redacted = "<redacted>"

// Secret is a token or API key. Call Reveal only at the point of use.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// IsSet reports whether the secret has a value.
func (s Secret) IsSet() bool { return s != "" }

func (s Secret) mask() string {
	if s == "" {
		return ""
	}
	return Redacted
}

func (s Secret) String() string               { return s.mask() }
func (s Secret) GoString() string             { return `"` + s.mask() + `"` }
func (s Secret) LogValue() slog.Value         { return slog.StringValue(s.mask()) }
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.mask()), nil }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.mask() + `"`), nil }
func (s Secret) MarshalYAML() (any, error)    { return s.mask(), nil }
