package channels

import (
	"errors"
	"fmt"
	"slices"
)

// DM policies.
const (
	DMAllowlist = "allowlist" // only users in allow_from may talk to the bot
	DMOpen      = "open"      // anyone may talk to the bot (a public bot)
)

// Access is the access policy every platform adapter enforces before Deliver. Adapters embed
// it in their config with `mapstructure:",squash"`.
type Access struct {
	AllowFrom      []string `mapstructure:"allow_from" json:"allow_from" yaml:"allow_from"`
	DMPolicy       string   `mapstructure:"dm_policy" json:"dm_policy" yaml:"dm_policy"`
	RequireMention bool     `mapstructure:"require_mention" json:"require_mention" yaml:"require_mention"`
}

// WithDefaults is the policy as Check applies it: no dm_policy is the allowlist.
func (a Access) WithDefaults() Access {
	if a.DMPolicy == "" {
		a.DMPolicy = DMAllowlist
	}
	return a
}

// Verdict is the outcome of an access check.
type Verdict int

const (
	Allowed      Verdict = iota
	NotAllowed           // the user is not on allow_from
	NotMentioned         // a group message that neither mentions nor replies to the bot
)

// Check applies the policy to a normalised message. Group messages must pass the mention
// gate when RequireMention is set; every message must come from allow_from unless the
// policy is open.
func (a Access) Check(m *Message) Verdict {
	if a.DMPolicy != DMOpen && !slices.Contains(a.AllowFrom, m.UserID) {
		return NotAllowed
	}
	if m.ChatType == ChatGroup && a.RequireMention && !m.Mentioned && (m.ReplyTo == nil || !m.ReplyTo.FromBot) {
		return NotMentioned
	}
	return Allowed
}

// NotAllowedText is what adapters answer in a DM to a user who is not on the allowlist, so
// that the admin can add them; groups stay silent to avoid noise. It gives the user's id,
// which the admin needs, but not the setting to put it in: the adapters' logs name
// allow_from beside the id.
func NotAllowedText(userID string) string {
	return "Sorry, you are not allowed to use this bot. To be let in, give its admin your user id: " + userID + "."
}

// Validate checks dm_policy and every allow_from id of the channel called name; validID
// says whether an id has the platform's form and hint tells the admin where to find one.
// Each error names its key (channels.NAME.allow_from[i]).
func (a Access) Validate(name string, validID func(string) bool, hint string) error {
	var errs []error
	switch a.DMPolicy {
	case "", DMAllowlist, DMOpen:
	default:
		errs = append(errs, fmt.Errorf("channels.%s.dm_policy: %q is not one of %s, %s", name, a.DMPolicy, DMAllowlist, DMOpen))
	}
	for i, id := range a.AllowFrom {
		if validID != nil && !validID(id) {
			errs = append(errs, fmt.Errorf("channels.%s.allow_from[%d]: %q is not a user id (%s)", name, i, id, hint))
		}
	}
	return errors.Join(errs...)
}
