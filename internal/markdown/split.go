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
// every chunk renders on its own. measure counts in the platform's unit (nil: runes);
// it must be additive over concatenation.
func Split(text string, limit int, measure func(string) int) []string {
	if measure == nil {
		measure = utf8.RuneCountInString
	}
	if limit <= 0 || measure(text) <= limit {
		return []string{text}
	}
	s := splitter{limit: limit, measure: measure, closeLen: measure(closeFence)}
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
}

func (s *splitter) budget() int {
	if s.fence != "" {
		return s.limit - s.closeLen
	}
	return s.limit
}

func (s *splitter) add(line string) {
	for s.curLen+s.measure(line) > s.budget() {
		if s.hasContent {
			s.flush(true)
			continue
		}
		room := s.budget() - s.curLen
		if room <= 0 {
			// The reopened fence alone does not fit: give up on reopening it.
			s.fence = ""
			s.cur.Reset()
			s.curLen = 0
			continue
		}
		piece, rest := cut(line, room, s.measure)
		s.write(piece)
		s.flush(true)
		line = rest
	}
	s.write(line)
	if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "```") {
		if s.fence == "" {
			s.fence = trimmed
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
}

// flush ends the current chunk; reopen starts the next one inside the open fence.
func (s *splitter) flush(reopen bool) {
	chunk := strings.TrimRight(s.cur.String(), "\n")
	if s.fence != "" && s.hasContent {
		chunk += closeFence
	}
	if strings.TrimSpace(chunk) != "" && s.hasContent {
		s.chunks = append(s.chunks, chunk)
	}
	s.cur.Reset()
	s.curLen = 0
	s.hasContent = false
	if reopen && s.fence != "" {
		s.cur.WriteString(s.fence + "\n")
		s.curLen = s.measure(s.fence + "\n")
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
