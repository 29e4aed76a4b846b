package childproc

import "sync"

// Tail keeps the last Max bytes written to it: the end of what a program wrote to stderr,
// which says why it failed, for an error to quote; a program that writes a lot costs no
// more. Safe for concurrent use: exec's copying goroutine writes while its caller may read.
type Tail struct {
	Max int

	mu  sync.Mutex
	b   []byte
	cut bool // more was written than is kept
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.Max {
		t.cut = t.cut || len(p) > t.Max || len(t.b) > 0
		t.b = append(t.b[:0], p[len(p)-t.Max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.Max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.cut = true
	}
	t.b = append(t.b, p...)
	return n, nil
}

// String is what is kept, as written.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Cut reports whether more was written than is kept.
func (t *Tail) Cut() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut
}
