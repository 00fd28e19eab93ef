package jwtclaims

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/jwttest"
)

func fileVerifier(t *testing.T, cfg Config, keys ...*jwttest.Key) (*Verifier, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	jwttest.WriteJWKS(t, path, keys...)
	cfg.JWKSFile, cfg.Issuer, cfg.Audience = path, jwttest.Issuer, jwttest.Audience
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v, path
}

// TestHostileTokens: only a token whose signature, times, issuer and
// audience check out yields claims.
func TestHostileTokens(t *testing.T) {
	good, other := jwttest.NewKey(t, "k1"), jwttest.NewKey(t, "k1")
	v, _ := fileVerifier(t, Config{}, good)
	now := time.Now()
	c := func(extra map[string]any) map[string]any {
		base := map[string]any{"sub": "alice", "plan": "pro"}
		for k, x := range extra {
			base[k] = x
		}
		return jwttest.Claims(now, base)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"forged: another key under the set's kid", other.Sign(t, c(nil)), ErrSignature},
		{"expired", good.Sign(t, c(map[string]any{"exp": now.Add(-time.Minute).Unix()})), ErrClaims},
		{"no exp", good.Sign(t, c(map[string]any{"exp": nil})), ErrClaims},
		{"not before the future", good.Sign(t, c(map[string]any{"nbf": now.Add(time.Hour).Unix()})), ErrClaims},
		{"issued in the future", good.Sign(t, c(map[string]any{"iat": now.Add(time.Hour).Unix()})), ErrClaims},
		{"wrong audience", good.Sign(t, c(map[string]any{"aud": "other"})), ErrClaims},
		{"wrong issuer", good.Sign(t, c(map[string]any{"iss": "https://evil.example"})), ErrClaims},
		{"alg none", jwttest.None("k1", c(nil)), ErrMalformed},
		{"alg none, no signature part", strings.TrimSuffix(jwttest.None("k1", c(nil)), "."), ErrMalformed},
		{"HS256 keyed with the public JWK", jwttest.HS256("k1", good.PublicJSON(), c(nil)), ErrMalformed},
		{"unknown kid", jwttest.NewKey(t, "k9").Sign(t, c(nil)), ErrUnknownKey},
		{"malformed", "not.a.token", ErrMalformed},
		{"empty", "", ErrMalformed},
		{"JSON serialization", `{"payload":"e30","signatures":[]}`, ErrMalformed},
		{"oversized", strings.Repeat("a", DefaultMaxTokenBytes+1), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.VerifyAt(tc.token, now)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrInvalid) || got != nil {
				t.Fatalf("VerifyAt = %v, %v; want nil, %v", got, err, tc.want)
			}
		})
	}
	got, err := v.VerifyAt(good.Sign(t, c(nil)), now)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := got.Value("sub"); s != "alice" {
		t.Fatalf("sub = %q", s)
	}
}

// TestHMACConfusion: with HS256 allowed, a token keyed with the public key
// still does not verify: only "oct" keys verify HMAC.
func TestHMACConfusion(t *testing.T) {
	k := jwttest.NewKey(t, "k1")
	v, _ := fileVerifier(t, Config{Algorithms: []string{"ES256", "HS256"}}, k)
	tok := jwttest.HS256("k1", k.PublicJSON(), jwttest.Claims(time.Now(), map[string]any{"sub": "x"}))
	if _, err := v.Verify(tok); !errors.Is(err, ErrSignature) {
		t.Fatalf("err = %v, want ErrSignature", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Issuer: "i", Audience: "a"},
		{JWKSFile: "f", JWKSURL: "http://x", Issuer: "i", Audience: "a"},
		{JWKSURL: "ftp://x", Issuer: "i", Audience: "a"},
		{JWKSFile: "f", Audience: "a"},
		{JWKSFile: "f", Issuer: "i"},
		{JWKSFile: "f", Issuer: "i", Audience: "a", Algorithms: []string{"none"}},
		{JWKSFile: filepath.Join(t.TempDir(), "absent.json"), Issuer: "i", Audience: "a"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

// TestFileRotation: a key added to the file verifies once the file is
// looked at again (at most a second later), without a restart; a file
// that stops parsing keeps the keys it held.
func TestFileRotation(t *testing.T) {
	a, b := jwttest.NewKey(t, "a"), jwttest.NewKey(t, "b")
	v, path := fileVerifier(t, Config{}, a)
	clock := time.Now()
	v.keys.now = func() time.Time { return clock }
	tok := b.Token(t, "bob", "")
	if _, err := v.Verify(tok); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("before rotation: %v", err)
	}
	jwttest.WriteJWKS(t, path, a, b)
	clock = clock.Add(recheck)
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	writeFile(t, path, `{"keys": [`)
	clock = clock.Add(recheck)
	if _, err := v.Verify(tok); err != nil || v.Err() == nil {
		t.Fatalf("after a broken file: %v (Err %v); want the last good keys and an error", err, v.Err())
	}
}

// jwksServer serves a JWK set whose answer the test changes.
type jwksServer struct {
	*httptest.Server
	hits   atomic.Int64
	answer atomic.Value // func(http.ResponseWriter)
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.answer.Load().(func(http.ResponseWriter, *http.Request))(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(t *testing.T, keys ...*jwttest.Key) {
	body := jwttest.JWKS(t, keys...)
	s.answer.Store(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })
}

func (s *jwksServer) fail(status int) {
	s.answer.Store(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
}

// TestURLFailureAndRecovery: a key set that cannot be fetched verifies
// nothing (no claims), and a later fetch, no sooner than RetryAfter,
// brings it in; a failure after that keeps the last good set.
func TestURLFailureAndRecovery(t *testing.T) {
	k := jwttest.NewKey(t, "k")
	srv := newJWKSServer(t)
	srv.fail(http.StatusInternalServerError)
	v, err := New(Config{JWKSURL: srv.URL, Issuer: jwttest.Issuer, Audience: jwttest.Audience, RetryAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if v.Err() == nil {
		t.Fatal("Err = nil after a failed fetch")
	}
	clock := time.Now()
	v.keys.now = func() time.Time { return clock }
	tok := k.Token(t, "u", "")
	srv.serve(t, k)
	if _, err := v.Verify(tok); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("no set yet: %v", err)
	}
	v.keys.wg.Wait()
	if srv.hits.Load() != 1 {
		t.Fatalf("fetched %d times before RetryAfter passed, want 1", srv.hits.Load())
	}
	clock = clock.Add(time.Minute)
	v.Verify(tok) // starts the fetch; this request is not held up
	v.keys.wg.Wait()
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("after a good fetch: %v", err)
	}
	srv.fail(http.StatusBadGateway)
	clock = clock.Add(DefaultRefresh)
	v.Verify(tok)
	v.keys.wg.Wait()
	if _, err := v.Verify(tok); err != nil || v.Err() == nil {
		t.Fatalf("after a failed refresh: %v (Err %v); want the last good set", err, v.Err())
	}
}

// TestURLHangsAndOversized: a server that never answers costs at most
// FetchTimeout, a set larger than the bound is refused.
func TestURLHangsAndOversized(t *testing.T) {
	srv := newJWKSServer(t)
	release := make(chan struct{})
	defer close(release)
	srv.answer.Store(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	start := time.Now()
	v, err := New(Config{JWKSURL: srv.URL, Issuer: "i", Audience: "a", FetchTimeout: 100 * time.Millisecond})
	if err != nil || v.Err() == nil {
		t.Fatalf("New = %v, Err %v; want a Verifier with the fetch's error", err, v.Err())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a hanging fetch took %v, bound 100ms", d)
	}
	big := `{"keys": [` + strings.Repeat(" ", 2<<10) + `]}`
	srv.answer.Store(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(big)) })
	v, _ = New(Config{JWKSURL: srv.URL, Issuer: "i", Audience: "a", MaxKeySetBytes: 1 << 10})
	if v.Err() == nil || !strings.Contains(v.Err().Error(), "larger than") {
		t.Fatalf("Err = %v, want larger than the bound", v.Err())
	}
}

// TestUnknownKidRefetch: a token under a new kid fetches the set again,
// at most once per RetryAfter however many such tokens arrive.
func TestUnknownKidRefetch(t *testing.T) {
	a, b := jwttest.NewKey(t, "a"), jwttest.NewKey(t, "b")
	srv := newJWKSServer(t)
	srv.serve(t, a)
	v, err := New(Config{JWKSURL: srv.URL, Issuer: jwttest.Issuer, Audience: jwttest.Audience})
	if err != nil || v.Err() != nil {
		t.Fatal(err, v.Err())
	}
	clock := time.Now()
	v.keys.now = func() time.Time { return clock }
	srv.serve(t, a, b) // rotation: b added
	clock = clock.Add(DefaultRetryAfter)
	tok := b.Token(t, "u", "")
	for range 100 {
		v.Verify(jwttest.NewKey(t, "made-up").Token(t, "u", ""))
	}
	v.keys.wg.Wait()
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches for 100 unknown kids, want 2 (the first and one refetch)", n)
	}
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc": "abc", "Basic abc": "", "Bearer": "", "Bearer a b": "", "Bearer ": ""} {
		if got, _ := BearerToken(in); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClaimsValue(t *testing.T) {
	var c Claims
	json.Unmarshal([]byte(`{"s":"x","e":"","n":12345678901234567890,"b":true,"o":{},"a":[1]}`), &c)
	c["n"] = json.Number("12345678901234567890")
	for name, want := range map[string]string{"s": "x", "e": "", "n": "12345678901234567890", "b": "true", "o": "", "a": "", "absent": ""} {
		if got, ok := c.Value(name); got != want || ok != (want != "") {
			t.Errorf("Value(%q) = %q, %v", name, got, ok)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkVerify measures verifying one ES256 token against a key set
// file (signature, claims, JSON decoding).
func BenchmarkVerify(b *testing.B) {
	k := jwttest.NewKey(b, "k1")
	path := filepath.Join(b.TempDir(), "jwks.json")
	jwttest.WriteJWKS(b, path, k)
	v, err := New(Config{JWKSFile: path, Issuer: jwttest.Issuer, Audience: jwttest.Audience})
	if err != nil {
		b.Fatal(err)
	}
	tok := k.Token(b, "user-1234", "pro")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
