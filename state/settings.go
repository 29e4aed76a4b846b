package state

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Settings are small per-chat values that must outlive a session's eviction and a restart:
// a chat's /voice choice, the Slack threads the bot answered in.
type Settings interface {
	Setting(scope, name string) (string, bool, error)
	SetSetting(scope, name, value string) error
	DeleteSetting(scope, name string) error
}

// Cursors are platform positions (the Telegram update offset).
type Cursors interface {
	Cursor(name string) (string, bool, error)
	SetCursor(name, value string) error
}

func settingKey(scope, name string) []byte { return []byte(scope + "\x00" + name) }

// Setting reads one value; false when unset.
func (s *DB) Setting(scope, name string) (string, bool, error) {
	return s.get(bucketSettings, settingKey(scope, name))
}

// SetSetting stores one value durably.
func (s *DB) SetSetting(scope, name, value string) error {
	return s.put(bucketSettings, settingKey(scope, name), value)
}

// DeleteSetting removes one value.
func (s *DB) DeleteSetting(scope, name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSettings).Delete(settingKey(scope, name)) })
}

// Cursor reads a platform cursor; false when unset.
func (s *DB) Cursor(name string) (string, bool, error) {
	s.mu.Lock()
	v, ok := s.pend.cursors[name]
	s.mu.Unlock()
	if ok {
		return v, true, nil
	}
	return s.get(bucketCursors, []byte(name))
}

// SetCursor stores a platform cursor durably, in one synced record of the intake log (the
// Telegram offset moves with every batch of updates).
func (s *DB) SetCursor(name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record(recCursor, 0, 0, name, []byte(value)); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

func (s *DB) get(bucket, key []byte) (val string, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucket).Get(key); v != nil {
			val, ok = string(v), true
		}
		return nil
	})
	return val, ok, err
}

func (s *DB) put(bucket, key []byte, value string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, []byte(value)) })
}
