package slack

import (
	"context"
	"regexp"
	"strings"
)

// Slack writes mentions, channel links, URLs and special words as <...> tokens and
// escapes &, < and > in message text. The model reads what a person sees instead.
var (
	// A token is <@U…>, <#C…>, <!word…> (a date format may hold spaces) or <scheme:…>,
	// with an optional |label.
	markupToken = regexp.MustCompile(`<([@#][^<>|\s]+|![^<>|]+|[a-zA-Z][a-zA-Z0-9+.-]*:[^<>|\s]+)(\|[^<>]*)?>`)
	userToken   = regexp.MustCompile(`<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>`)
	entities    = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")
)

// plainText turns Slack markup into the words a person sees: <@U1|ann> is "@ann" (or the
// looked-up name, given by name), <#C1|general> "#general", <https://x|docs> "docs (https://x)",
// <!here> "@here", and &amp; &lt; &gt; are unescaped.
func plainText(s string, name func(id string) string) string {
	if !strings.ContainsAny(s, "<&") {
		return s
	}
	s = markupToken.ReplaceAllStringFunc(s, func(tok string) string {
		ref, label, hasLabel := strings.Cut(tok[1:len(tok)-1], "|")
		switch {
		case strings.HasPrefix(ref, "@"):
			if hasLabel && label != "" {
				return "@" + strings.TrimPrefix(label, "@")
			}
			if name != nil {
				if n := name(ref[1:]); n != "" {
					return "@" + n
				}
			}
			return ref
		case strings.HasPrefix(ref, "#"):
			if hasLabel && label != "" {
				return "#" + strings.TrimPrefix(label, "#")
			}
			return ref
		case strings.HasPrefix(ref, "!"):
			word := ref[1:]
			switch {
			case hasLabel && label != "":
				if strings.HasPrefix(word, "subteam^") && !strings.HasPrefix(label, "@") {
					return "@" + label
				}
				return label // <!date^...|fallback text>, <!subteam^S1|@team>
			case word == "here" || word == "channel" || word == "everyone":
				return "@" + word
			case strings.HasPrefix(word, "subteam^"):
				return "@group"
			}
			return word
		}
		// A link: <url>, <url|label>, <mailto:a@b|a@b>.
		url := ref
		if addr, ok := strings.CutPrefix(url, "mailto:"); ok {
			url = addr
		}
		if !hasLabel || label == "" || label == url || label == ref || strings.TrimPrefix(strings.TrimPrefix(url, "https://"), "http://") == label {
			return url
		}
		return label + " (" + url + ")"
	})
	return entities.Replace(s)
}

// mentionedNames looks up the names of the users mentioned without a label (Slack's
// current form, <@U123>) within ctx; a name not known in time stays the id.
func (c *Channel) mentionedNames(ctx context.Context, texts ...string) func(string) string {
	found := map[string]string{}
	for _, t := range texts {
		for _, m := range userToken.FindAllStringSubmatch(t, -1) {
			id := m[1]
			if _, ok := found[id]; ok || strings.Contains(m[0], "|") {
				continue
			}
			found[id] = ""
			if ctx.Err() == nil {
				found[id] = c.names.get(ctx, id)
			}
		}
	}
	return func(id string) string { return found[id] }
}
