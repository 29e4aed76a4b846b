package channeltest

import (
	"sync"
	"time"

	"gateway/channels"
)

// MemState is a channels.State in memory, for the cases that build an adapter again on
// the same state (a restart): what one instance kept, the next one reads. Its bounds are
// not enforced; its ages are.
type MemState struct {
	mu      sync.Mutex
	cursors map[string]string
	keys    map[string]map[string]time.Time
}

// NewMemState returns an empty MemState.
func NewMemState() *MemState {
	return &MemState{cursors: map[string]string{}, keys: map[string]map[string]time.Time{}}
}

var _ channels.State = (*MemState)(nil)

func (s *MemState) Cursor(name string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.cursors[name]
	return v, ok, nil
}

func (s *MemState) SetCursor(name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursors[name] = value
	return nil
}

func (s *MemState) Remember(set, key string, _ int, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[set] == nil {
		s.keys[set] = map[string]time.Time{}
	}
	s.keys[set][key] = time.Now()
	return nil
}

func (s *MemState) Remembered(set, key string, age time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.keys[set][key]
	return ok && time.Since(t) < age, nil
}
