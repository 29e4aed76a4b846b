// Package markdown renders and splits the model's Markdown for chat platforms.
package markdown

import (
	"strings"
	"unicode/utf8"
)

const closeFence = "\n```"

// Split cuts Markdown into chunks that each measure at most limit, preferring to break
// between lines and then between words. A chunk that ends inside a fenced code block
// closes the fence, and the next chunk reopens it with the same info string, so that
// every chunk renders on its own; a fence the text leaves open (an answer still streaming,
// or cut short) is closed too. A fence that would open with no room left for its
// content starts the next chunk instead, so that no chunk ends in an empty code block.
// measure counts in the platform's unit (nil: runes); it must be additive over
// concatenation.
func Split(text string, limit int, measure func(string) int) []string {
	if measure == nil {
		measure = utf8.RuneCountInString
	}
	if limit <= 0 || (measure(text) <= limit && !strings.Contains(text, "```")) {
		return []string{text}
	}
	s := splitter{limit: limit, measure: measure, closeLen: measure(closeFence), opened: -1}
	for _, line := range strings.SplitAfter(text, "\n") {
		s.add(line)
	}
	s.flush(false)
	return s.chunks
}

type splitter struct {
	limit, closeLen int
	measure         func(string) int
	chunks          []string
	cur             strings.Builder
	curLen          int
	hasContent      bool   // cur holds more than a reopened fence
	fence           string // the opening fence line while inside a code block
	// opened is where in cur the open fence's own line starts while nothing but newlines
	// followed it (-1 otherwise): cut there, the chunk would end in an empty code block.
	opened int
	// reopened: that fence line is one the splitter wrote, not the text's.
	reopened bool
}

func (s *splitter) budget() int {
	if s.fence != "" {
		return s.limit - s.closeLen
	}
	return s.limit
}

// fits reports whether line fits in the current chunk, keeping room to close an open fence.
func (s *splitter) fits(line string) bool {
	if s.fence != "" && strings.TrimSpace(line) == "```" {
		// The text's own closing fence takes the place of the one a cut would add.
		return s.curLen+s.measure(strings.TrimRight(line, "\n")) <= s.limit
	}
	return s.curLen+s.measure(line) <= s.budget()
}

func (s *splitter) add(line string) {
	if s.opened >= 0 && s.reopened && strings.TrimSpace(line) == "```" {
		// The block ends right where a cut reopened it: drop the reopened fence rather
		// than send it empty.
		s.reset()
		s.fence = ""
		return
	}
	for !s.fits(line) {
		if s.hasContent {
			s.flush(true)
			continue
		}
		room := s.budget() - s.curLen
		if room <= 0 {
			// The reopened fence alone does not fit: give up on reopening it.
			s.fence = ""
			s.reset()
			continue
		}
		piece, rest := cut(line, room, s.measure)
		s.write(piece)
		s.flush(true)
		line = rest
	}
	at := s.cur.Len()
	s.write(line)
	if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "```") {
		if s.fence == "" {
			s.fence, s.opened = trimmed, at
		} else if trimmed == "```" {
			s.fence = ""
		}
	}
}

func (s *splitter) write(str string) {
	if str == "" {
		return
	}
	s.cur.WriteString(str)
	s.curLen += s.measure(str)
	s.hasContent = true
	if strings.Trim(str, "\n") != "" {
		s.opened, s.reopened = -1, false
	}
}

// reset empties the current chunk.
func (s *splitter) reset() {
	s.cur.Reset()
	s.curLen = 0
	s.hasContent = false
	s.opened, s.reopened = -1, false
}

// flush ends the current chunk; reopen starts the next one inside the open fence.
func (s *splitter) flush(reopen bool) {
	body, carry, reopened := s.cur.String(), "", s.reopened
	closing := s.fence != "" && s.hasContent
	if s.opened >= 0 {
		// The open fence holds nothing yet: it moves to the next chunk (unless even there it
		// would leave no room for content), or, reopened by a cut, it is not shown at all.
		switch c := body[s.opened:]; {
		case reopen && s.measure(c)+s.closeLen < s.limit:
			body, carry, closing = body[:s.opened], c, false
		case reopened:
			body, closing = body[:s.opened], false
		}
	}
	chunk := strings.TrimRight(body, "\n")
	if closing {
		chunk += closeFence
	}
	if strings.TrimSpace(chunk) != "" && s.hasContent {
		s.chunks = append(s.chunks, chunk)
	}
	s.reset()
	switch {
	case carry != "":
		s.cur.WriteString(carry)
		s.curLen = s.measure(carry)
		s.opened, s.reopened = 0, reopened
	case reopen && s.fence != "":
		s.cur.WriteString(s.fence + "\n")
		s.curLen = s.measure(s.fence + "\n")
		s.opened, s.reopened = 0, true
	}
}

// cut returns the longest prefix of line that measures at most room, broken after the last
// space when there is one in its second half, and the rest.
func cut(line string, room int, measure func(string) int) (string, string) {
	n, end, lastSpace := 0, 0, -1
	for i, r := range line {
		w := measure(string(r))
		if n+w > room {
			break
		}
		n += w
		end = i + utf8.RuneLen(r)
		if r == ' ' {
			lastSpace = end
		}
	}
	if end == 0 { // not even one rune fits the room: take one anyway to make progress
		_, size := utf8.DecodeRuneInString(line)
		end = size
	}
	if lastSpace > end/2 {
		end = lastSpace
	}
	return line[:end], line[end:]
}
