package jwtclaims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Errors of Verify; each wraps ErrInvalid.
var (
	ErrInvalid    = errors.New("jwtclaims: invalid token")
	ErrTooLarge   = fmt.Errorf("%w: too large", ErrInvalid)
	ErrMalformed  = fmt.Errorf("%w: malformed or algorithm not allowed", ErrInvalid)
	ErrUnknownKey = fmt.Errorf("%w: no key of the set verifies it (unknown kid)", ErrInvalid)
	ErrSignature  = fmt.Errorf("%w: signature does not verify", ErrInvalid)
	ErrClaims     = fmt.Errorf("%w: claims do not check out", ErrInvalid)
)

// Defaults of Config.
const (
	DefaultMaxTokenBytes = 8 << 10
	DefaultLeeway        = 30 * time.Second
	DefaultMaxKeySet     = 1 << 20
	DefaultFetchTimeout  = 5 * time.Second
	DefaultRefresh       = 10 * time.Minute
	DefaultRetryAfter    = 30 * time.Second
)

// DefaultAlgorithms are the algorithms a Verifier accepts unless
// Config.Algorithms names others: the asymmetric ones.
var DefaultAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Config says which tokens a Verifier accepts. Issuer, Audience and one of
// JWKSFile and JWKSURL are required; every other field's zero value is its
// default.
type Config struct {
	// JWKSFile is a file holding the JWK set (RFC 7517), read again when
	// it changes.
	JWKSFile string
	// JWKSURL is where the JWK set is fetched from (an identity
	// provider's jwks_uri).
	JWKSURL string
	// Issuer is the iss claim a token must carry.
	Issuer string
	// Audience is a value the token's aud claim must hold.
	Audience string
	// Algorithms a token may be signed with. Default: DefaultAlgorithms.
	// "none" is never accepted; HS256, HS384 and HS512 only when named
	// here (their keys are then the set's "oct" keys).
	Algorithms []string
	// Leeway is the clock skew tolerated on exp, nbf and iat. Default
	// (zero): DefaultLeeway; negative: none.
	Leeway time.Duration
	// MaxTokenBytes bounds a token; a longer one is refused unread.
	// Default: DefaultMaxTokenBytes.
	MaxTokenBytes int
	// MaxKeySetBytes bounds the key set file or response. Default:
	// DefaultMaxKeySet.
	MaxKeySetBytes int64
	// FetchTimeout bounds a fetch of JWKSURL. Default: DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Refresh is how often JWKSURL is fetched again. Default:
	// DefaultRefresh.
	Refresh time.Duration
	// RetryAfter is how long after a fetch another one may start because
	// a token names an unknown kid or the last fetch failed. Default:
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// Client fetches JWKSURL. Default: an http.Client of its own.
	Client *http.Client
	// Logger logs reloads and failed fetches. Default: slog.Default().
	Logger *slog.Logger
}

// Verifier verifies tokens against a Config's key set, issuer and
// audience. It is safe for concurrent use.
type Verifier struct {
	issuer, audience string
	algs             []jose.SignatureAlgorithm
	leeway           time.Duration
	maxToken         int
	keys             *keySet
}

// New returns a Verifier for cfg. It reads cfg.JWKSFile (an error if it
// does not hold a key set) or fetches cfg.JWKSURL once (a failure is not
// an error: the Verifier verifies no token until a later fetch succeeds,
// and Err says why).
func New(cfg Config) (*Verifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := &Verifier{issuer: cfg.Issuer, audience: cfg.Audience, leeway: cfg.Leeway, maxToken: cfg.MaxTokenBytes}
	if v.leeway == 0 {
		v.leeway = DefaultLeeway
	}
	v.leeway = max(v.leeway, 0)
	if v.maxToken <= 0 {
		v.maxToken = DefaultMaxTokenBytes
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms
	}
	for _, a := range algs {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	v.keys = &keySet{file: cfg.JWKSFile, url: cfg.JWKSURL, client: cfg.Client, maxBytes: cfg.MaxKeySetBytes,
		timeout: cfg.FetchTimeout, refresh: cfg.Refresh, retry: cfg.RetryAfter, log: cfg.Logger, now: time.Now,
		symmetric: slices.ContainsFunc(algs, func(a string) bool { return strings.HasPrefix(a, "HS") })}
	v.keys.defaults()
	if err := v.keys.load(); err != nil {
		return nil, &ConfigError{Field: "jwks_file", Reason: err.Error()}
	}
	return v, nil
}

// ConfigError is one thing wrong in a Config: the field, named as a
// policy file writes it (jwks_file, issuer, ...), and what is wrong. New
// returns every one found, joined.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string { return "jwtclaims: " + e.Field + ": " + e.Reason }

// validate reports what is missing or wrong in cfg.
func (cfg *Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if (cfg.JWKSFile == "") == (cfg.JWKSURL == "") {
		bad("jwks_file", "give jwks_file or jwks_url (one of them)")
	}
	if cfg.JWKSURL != "" && !strings.HasPrefix(cfg.JWKSURL, "https://") && !strings.HasPrefix(cfg.JWKSURL, "http://") {
		bad("jwks_url", "%q: want an http:// or https:// URL", cfg.JWKSURL)
	}
	if cfg.Issuer == "" {
		bad("issuer", "missing (the iss claim tokens must carry)")
	}
	if cfg.Audience == "" {
		bad("audience", "missing (a value the aud claim of tokens must hold)")
	}
	for _, a := range cfg.Algorithms {
		if !slices.Contains(DefaultAlgorithms, a) && a != "HS256" && a != "HS384" && a != "HS512" {
			bad("algorithms", "%q is not a signature algorithm sluice accepts (%s, HS256, HS384, HS512)", a, strings.Join(DefaultAlgorithms, ", "))
		}
	}
	return errors.Join(errs...)
}

func (s *keySet) defaults() {
	if s.client == nil {
		s.client = &http.Client{}
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxKeySet
	}
	if s.timeout <= 0 {
		s.timeout = DefaultFetchTimeout
	}
	if s.refresh <= 0 {
		s.refresh = DefaultRefresh
	}
	if s.retry <= 0 {
		s.retry = DefaultRetryAfter
	}
	if s.log == nil {
		s.log = slog.Default()
	}
}

// Err is the last failure to read or fetch the key set (the last good set
// stays in use), nil once a read or fetch succeeds.
func (v *Verifier) Err() error { return v.keys.Err() }

// Verify is shorthand for VerifyAt(token, time.Now()).
func (v *Verifier) Verify(token string) (Claims, error) { return v.VerifyAt(token, time.Now()) }

// VerifyAt returns the claims of token if its signature verifies with a
// key of the set and its claims check out at now: exp present and not
// past, nbf and iat not in the future (each within the leeway), iss the
// issuer, aud holding the audience. Every error wraps ErrInvalid.
func (v *Verifier) VerifyAt(token string, now time.Time) (Claims, error) {
	if len(token) > v.maxToken {
		return nil, ErrTooLarge
	}
	sig, err := jose.ParseSignedCompact(token, v.algs)
	if err != nil || len(sig.Signatures) != 1 {
		return nil, ErrMalformed
	}
	payload, err := v.verifySignature(sig)
	if err != nil {
		return nil, err
	}
	var std jwt.Claims
	if err := json.Unmarshal(payload, &std); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrClaims, err)
	}
	if std.Expiry == nil {
		return nil, fmt.Errorf("%w: no exp", ErrClaims)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: v.issuer, AnyAudience: jwt.Audience{v.audience}, Time: now}, v.leeway); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrClaims, err)
	}
	claims := Claims{}
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber() // ids stay exact, not float64
	if err := d.Decode(&claims); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrClaims, err)
	}
	return claims, nil
}

// verifySignature verifies sig with the key its kid names (the one key of
// the set when it names none) and returns the payload.
func (v *Verifier) verifySignature(sig *jose.JSONWebSignature) ([]byte, error) {
	h := sig.Signatures[0].Protected
	set := v.keys.current()
	if set == nil {
		return nil, ErrUnknownKey
	}
	keys := set.Keys
	if h.KeyID != "" {
		keys = set.Key(h.KeyID)
	} else if len(keys) != 1 {
		return nil, fmt.Errorf("%w: the token names no kid and the set holds %d keys", ErrUnknownKey, len(keys))
	}
	if len(keys) == 0 {
		v.keys.unknownKey()
		return nil, ErrUnknownKey
	}
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		if payload, err := sig.Verify(k); err == nil {
			return payload, nil
		}
	}
	return nil, ErrSignature
}

// Request returns the verified claims of the bearer token r's
// Authorization header carries: nil when it carries none, or one that
// does not verify, or several Authorization headers.
func (v *Verifier) Request(r *http.Request) Claims {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return nil
	}
	return v.Authorization(vs[0])
}

// Authorization returns the verified claims of the bearer token in an
// Authorization header's (or gRPC authorization metadata's) value: nil
// when it is not "Bearer TOKEN" or the token does not verify.
func (v *Verifier) Authorization(value string) Claims {
	tok, ok := BearerToken(value)
	if !ok {
		return nil
	}
	c, err := v.Verify(tok)
	if err != nil {
		return nil
	}
	return c
}

// BearerToken returns the token of an Authorization value "Bearer TOKEN"
// (the scheme in any case, RFC 6750).
func BearerToken(value string) (string, bool) {
	scheme, tok, ok := strings.Cut(value, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}

// Claims are the claims of a verified token, decoded from JSON (numbers
// as json.Number).
type Claims map[string]any

// Value returns a claim as a key value: a string as it is, a number as
// written, a boolean as true or false. ok is false when the claim is
// absent, empty, or an object, array or null.
func (c Claims) Value(name string) (value string, ok bool) {
	switch v := c[name].(type) {
	case string:
		return v, v != ""
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

type ctxKey struct{}

// verified is what NewContext stores: claims, possibly none, of a request
// whose token was looked at.
type verified struct{ claims Claims }

// NewContext returns ctx carrying c, the verified claims of the request
// ctx belongs to (nil when it had no token that verified).
func NewContext(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, ctxKey{}, verified{c})
}

// FromContext returns the claims NewContext stored; ok is false when it
// stored none, that is when the request's token was never looked at
// (which differs from a token that did not verify: claims nil, ok true).
func FromContext(ctx context.Context) (c Claims, ok bool) {
	v, ok := ctx.Value(ctxKey{}).(verified)
	return v.claims, ok
}
