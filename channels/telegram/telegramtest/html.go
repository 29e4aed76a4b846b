package telegramtest

import (
	"fmt"
	"html"
	"strings"
)

// allowedTag reports whether name is a tag of Telegram's HTML parse mode.
func allowedTag(name string) bool {
	switch name {
	case "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre", "blockquote", "tg-emoji":
		return true
	}
	return false
}

// ParseHTML parses text as Telegram's parse_mode HTML does, strictly, and returns the text a
// user sees. Errors read like Telegram's ("Unsupported start tag ...").
func ParseHTML(text string) (string, error) {
	var out strings.Builder
	var stack []string
	for i := 0; i < len(text); {
		switch text[i] {
		case '<':
			j := strings.IndexByte(text[i:], '>')
			if j < 0 {
				return "", fmt.Errorf("Unclosed start tag at byte offset %d", i)
			}
			tag := text[i+1 : i+j]
			if strings.HasPrefix(tag, "/") {
				name := strings.ToLower(strings.TrimSpace(tag[1:]))
				if len(stack) == 0 {
					return "", fmt.Errorf("Unexpected end tag at byte offset %d", i)
				}
				if top := stack[len(stack)-1]; top != name {
					return "", fmt.Errorf("Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", i, top, name)
				}
				stack = stack[:len(stack)-1]
			} else {
				name, attrs, _ := strings.Cut(tag, " ")
				name = strings.ToLower(name)
				if !allowedTag(name) {
					return "", fmt.Errorf("Unsupported start tag \"%s\" at byte offset %d", name, i)
				}
				if name == "a" && !strings.Contains(attrs, "href=") {
					return "", fmt.Errorf("Can't find href attribute of the a tag at byte offset %d", i)
				}
				if name == "span" && !strings.Contains(attrs, "tg-spoiler") {
					return "", fmt.Errorf("Tag \"span\" must have class \"tg-spoiler\" at byte offset %d", i)
				}
				for _, open := range stack {
					if (open == "code" || open == "pre") && !(open == "pre" && name == "code") {
						return "", fmt.Errorf("Can't nest \"%s\" inside \"%s\" at byte offset %d", name, open, i)
					}
				}
				stack = append(stack, name)
			}
			i += j + 1
		case '&':
			j := strings.IndexByte(text[i:], ';')
			if j > 1 && j <= 10 && !strings.ContainsAny(text[i+1:i+j], " &<") {
				ent := text[i : i+j+1]
				dec := html.UnescapeString(ent)
				known := ent == "&lt;" || ent == "&gt;" || ent == "&amp;" || ent == "&quot;" || strings.HasPrefix(ent, "&#")
				if !known || dec == ent {
					return "", fmt.Errorf("Unsupported HTML entity \"%s\" at byte offset %d", ent, i)
				}
				out.WriteString(dec)
				i += j + 1
				continue
			}
			out.WriteByte('&')
			i++
		default:
			out.WriteByte(text[i])
			i++
		}
	}
	if len(stack) > 0 {
		return "", fmt.Errorf("Can't find end tag corresponding to start tag \"%s\"", stack[len(stack)-1])
	}
	return out.String(), nil
}

// UTF16Len measures s in UTF-16 code units, Telegram's unit for lengths and offsets.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
