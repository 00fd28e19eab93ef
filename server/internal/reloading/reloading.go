// Package reloading holds values parsed from files (TLS certificates, CA
// bundles, token lists) and parses them again when the files change.
package reloading

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// recheck is how often at most a reloading file is looked at again (one
// stat per file), so a handshake or a request costs no system call.
const recheck = time.Second

// fileStamp tells whether a file changed: its size and modification time,
// or the error reading them.
type fileStamp struct {
	size int64
	mod  time.Time
	err  string
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path) // follows symlinks: a Kubernetes Secret's ..data swap changes the target
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	return fileStamp{size: fi.Size(), mod: fi.ModTime()}
}

// Value holds a value parsed from files and parses them again when
// they change, at most once per recheck. A change that does not parse
// keeps the previous value and is logged. It is safe for concurrent use.
type Value[T any] struct {
	what  string
	paths []string
	parse func() (T, error)
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	val     T
	stamps  []fileStamp
	checked time.Time
}

// New parses the files once; an error here is a start-up error.
func New[T any](what string, paths []string, parse func() (T, error), log *slog.Logger) (*Value[T], error) {
	r := &Value[T]{what: what, paths: paths, parse: parse, log: log, now: time.Now}
	r.stamps = r.stampAll()
	v, err := parse()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r.val, r.checked = v, r.now()
	return r, nil
}

func (r *Value[T]) stampAll() []fileStamp {
	s := make([]fileStamp, len(r.paths))
	for i, p := range r.paths {
		s[i] = stamp(p)
	}
	return s
}

// Get returns the current value, parsing the files again if they changed.
func (r *Value[T]) Get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < recheck {
		return r.val
	}
	r.checked = now
	st := r.stampAll()
	if equalStamps(st, r.stamps) {
		return r.val
	}
	r.stamps = st
	v, err := r.parse()
	if err != nil {
		r.log.Error(r.what+" changed but did not load; the previous one stays", "files", r.paths, "err", err)
		return r.val
	}
	r.val = v
	r.log.Info(r.what+" reloaded", "files", r.paths)
	return r.val
}

func equalStamps(a, b []fileStamp) bool {
	for i := range a {
		if a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) || a[i].err != b[i].err {
			return false
		}
	}
	return true
}

// KeyPair reads a PEM certificate (chain) and its key.
func KeyPair(certFile, keyFile string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		return &c, nil
	}
}

// CAs reads a PEM bundle of CA certificates.
func CAs(file string) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, errors.New(file + ": no PEM certificate in it")
		}
		return pool, nil
	}
}
