package jwtclaims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// recheck is how often at most a key set file is looked at again (one
// stat), so that verifying a token costs no system call.
const recheck = time.Second

// keySet holds the verifying keys and refreshes them from their file or
// URL. Readers load keys without a lock; mu serialises refreshes.
type keySet struct {
	file, url string
	client    *http.Client
	maxBytes  int64
	timeout   time.Duration
	refresh   time.Duration // a URL is fetched again after this
	retry     time.Duration // and, on an unknown kid or a failure, no sooner than this
	symmetric bool          // an HMAC algorithm is allowed: keep "oct" keys
	log       *slog.Logger
	now       func() time.Time

	keys atomic.Pointer[jose.JSONWebKeySet]

	mu       sync.Mutex
	stamp    string    // the file's size and modification time
	checked  time.Time // the last stat of the file, or the last fetch's start
	fetched  time.Time // the last fetch that succeeded
	fetching bool
	err      error // the last read or fetch's error; nil once one succeeds
	wg       sync.WaitGroup
}

// load reads the file or fetches the URL for the first time. An error
// reading a file is returned; a URL that cannot be fetched leaves the set
// empty (Err says why) and is fetched again on use.
func (s *keySet) load() error {
	now := s.now()
	s.checked = now
	if s.file != "" {
		s.stamp = fileStamp(s.file)
		set, err := s.readFile()
		if err != nil {
			return err
		}
		s.keys.Store(set)
		return nil
	}
	s.fetch(now)
	return nil
}

// current returns the keys, first starting a refresh when one is due.
func (s *keySet) current() *jose.JSONWebKeySet {
	now := s.now()
	s.mu.Lock()
	if s.file != "" {
		if now.Sub(s.checked) >= recheck {
			s.checked = now
			s.rereadFile()
		}
	} else if now.Sub(s.fetched) >= s.refresh && now.Sub(s.checked) >= s.retry {
		s.startFetch(now)
	}
	s.mu.Unlock()
	return s.keys.Load()
}

// unknownKey starts a fetch for a kid the set does not hold, at most once
// per retry: a rotated key is picked up, and a stream of tokens with
// made-up kids costs one fetch per retry.
func (s *keySet) unknownKey() {
	if s.url == "" {
		return
	}
	now := s.now()
	s.mu.Lock()
	if now.Sub(s.checked) >= s.retry {
		s.startFetch(now)
	}
	s.mu.Unlock()
}

// startFetch fetches the URL in the background unless a fetch is under
// way. s.mu is held.
func (s *keySet) startFetch(now time.Time) {
	if s.fetching {
		return
	}
	s.fetching, s.checked = true, now
	s.wg.Go(func() { s.fetch(now) })
}

// fetch fetches the URL once and keeps what it holds, or logs why not and
// keeps the last good set.
func (s *keySet) fetch(started time.Time) {
	set, err := s.get()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetching, s.err = false, err
	if err != nil {
		s.log.Error("jwt: the key set could not be fetched; the last good one stays", "url", s.url, "err", err)
		return
	}
	s.fetched = started
	s.keys.Store(set)
}

// get fetches and parses the URL, within the timeout and the size bound.
func (s *keySet) get() (*jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", s.url, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBytes+1))
	if err != nil {
		return nil, err
	}
	return s.parse(data)
}

// rereadFile reads the file again when its stamp changed. s.mu is held.
func (s *keySet) rereadFile() {
	st := fileStamp(s.file)
	if st == s.stamp {
		return
	}
	s.stamp = st
	set, err := s.readFile()
	s.err = err
	if err != nil {
		s.log.Error("jwt: the key set file changed but did not load; the previous keys stay", "file", s.file, "err", err)
		return
	}
	s.keys.Store(set)
	s.log.Info("jwt: key set reloaded", "file", s.file, "keys", len(set.Keys))
}

func (s *keySet) readFile() (*jose.JSONWebKeySet, error) {
	f, err := os.Open(s.file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, s.maxBytes+1))
	if err != nil {
		return nil, err
	}
	set, err := s.parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.file, err)
	}
	return set, nil
}

// fileStamp is a file's size and modification time, or the error reading
// them: what changes when the file does.
func fileStamp(path string) string {
	fi, err := os.Stat(path) // follows symlinks: a Kubernetes Secret's ..data swap changes the target
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}

// parse reads a JWK set, keeping the public keys meant for signatures
// (and symmetric ones only when an HMAC algorithm is allowed). A set with
// no such key is an error.
func (s *keySet) parse(data []byte) (*jose.JSONWebKeySet, error) {
	if int64(len(data)) > s.maxBytes {
		return nil, fmt.Errorf("larger than %d bytes", s.maxBytes)
	}
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JWK set: %w", err)
	}
	set := &jose.JSONWebKeySet{}
	var errs []error
	for i, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil {
			errs = append(errs, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		if k.Use == "enc" || !k.Valid() {
			continue
		}
		if _, oct := k.Key.([]byte); oct && !s.symmetric {
			continue
		}
		if !k.IsPublic() {
			if _, oct := k.Key.([]byte); !oct {
				k = k.Public() // a private key in a public set: only its public half verifies
			}
		}
		set.Keys = append(set.Keys, k)
	}
	if len(set.Keys) == 0 {
		errs = append(errs, errors.New(`no key to verify signatures with (want {"keys": [{"kty": "RSA", ...}]})`))
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// Err is the last failure to read or fetch the key set, nil after a
// success.
func (s *keySet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
