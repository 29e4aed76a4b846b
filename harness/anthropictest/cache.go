package anthropictest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// The prompt cache, as the API keeps it: a request's content blocks, in the order the
// cache reads them (tools, then system, then each message's blocks), are prefixes that a
// block marked with cache_control writes to the cache, when the prefix is at least the
// minimum cacheable length. A later request reads the longest cached prefix found at one
// of its breakpoints or up to lookback blocks before one. At most maxBreakpoints blocks may
// carry cache_control. Tokens are counted as Tokens counts them: 4 bytes of a block's JSON.

const (
	maxBreakpoints  = 4
	lookback        = 20
	defaultCacheMin = 1024 // the API's minimum for its Sonnet and Opus models
)

// CacheUse is what the cache did for a request, reported in its usage.
type CacheUse struct {
	Read    int // cache_read_input_tokens
	Written int // cache_creation_input_tokens
	// Breakpoints is how many blocks carried cache_control.
	Breakpoints int
}

// SetCacheMin sets the minimum length, in tokens, of a prefix the cache keeps (the API's
// is 1024 or more, by model); 0 restores that default.
func (s *Server) SetCacheMin(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cacheMin = tokens
}

// cacheBlocks lists the request's blocks in the cache's order: their JSON without
// cache_control (what the cache compares) and whether they carried it.
func cacheBlocks(wr *wireCacheRequest) (blocks []json.RawMessage, marked []bool) {
	add := func(kind string, raw json.RawMessage) {
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			blocks, marked = append(blocks, append(json.RawMessage(kind), raw...)), append(marked, false)
			return
		}
		_, has := m["cache_control"]
		delete(m, "cache_control")
		b, _ := json.Marshal(m) // map keys sorted: the same block gives the same bytes
		blocks, marked = append(blocks, append(json.RawMessage(kind), b...)), append(marked, has)
	}
	for _, t := range wr.Tools {
		add("tool", t)
	}
	for _, b := range rawBlocks(wr.System) {
		add("system", b)
	}
	for i, m := range wr.Messages {
		for _, b := range rawBlocks(m.Content) {
			add(fmt.Sprintf("%d:%s", i, m.Role), b)
		}
	}
	return blocks, marked
}

// rawBlocks is content given as a string (one text block) or as an array of blocks.
func rawBlocks(raw json.RawMessage) []json.RawMessage {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
		return []json.RawMessage{b}
	}
	var bs []json.RawMessage
	_ = json.Unmarshal(raw, &bs)
	return bs
}

type wireCacheRequest struct {
	Model    string            `json:"model"`
	Tools    []json.RawMessage `json:"tools"`
	System   json.RawMessage   `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// useCache reads and writes the cache for a request body; errMsg is the API's 400 message
// when the request marks too many blocks. Called with s.mu held.
func (s *Server) useCache(body []byte) (use CacheUse, errMsg string) {
	var wr wireCacheRequest
	if json.Unmarshal(body, &wr) != nil {
		return use, ""
	}
	blocks, marked := cacheBlocks(&wr)
	var points []int
	for i, m := range marked {
		if m {
			points = append(points, i)
		}
	}
	use.Breakpoints = len(points)
	if len(points) > maxBreakpoints {
		return use, fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", maxBreakpoints, len(points))
	}
	if len(points) == 0 {
		return use, ""
	}
	// The prefix ending at each block: its hash and its length in tokens.
	sums := make([][32]byte, len(blocks))
	tokens := make([]int, len(blocks))
	h := sha256.Sum256([]byte(wr.Model))
	n := 0
	for i, b := range blocks {
		h = sha256.Sum256(append(h[:], b...))
		n += len(b) / 4
		sums[i], tokens[i] = h, n
	}
	if s.cache == nil {
		s.cache = map[[32]byte]bool{}
	}
	for _, p := range points {
		for j := p; j >= 0 && j >= p-lookback; j-- {
			if s.cache[sums[j]] {
				use.Read = max(use.Read, tokens[j])
				break
			}
		}
	}
	least := s.cacheMin
	if least == 0 {
		least = defaultCacheMin
	}
	for _, p := range points {
		if tokens[p] >= least && !s.cache[sums[p]] {
			s.cache[sums[p]] = true
			use.Written = max(use.Written, tokens[p]-use.Read)
		}
	}
	return use, ""
}
