// Package logtest holds what tests need to read what sluice logs.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a logger writes and a test reads at once.
// The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p, for the logger.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
