// Package jwttest makes signing keys, JWK sets and tokens for tests of
// verified JWT claims: good ones, and the forgeries a client could send
// (alg none, HS256 keyed with the public key, another key under a known
// kid).
package jwttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Issuer and Audience are what tokens of Sign carry unless told otherwise.
const (
	Issuer   = "https://issuer.example"
	Audience = "api"
)

// Key is an ES256 signing key with its kid.
type Key struct {
	KID  string
	priv *ecdsa.PrivateKey
}

// NewKey makes a fresh ES256 key.
func NewKey(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{KID: kid, priv: k}
}

// JWK is the key's public half as a JWK.
func (k *Key) JWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.KID, Algorithm: "ES256", Use: "sig"}
}

// JWKS returns the JWK set of keys' public halves.
func JWKS(t testing.TB, keys ...*Key) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.JWK())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteJWKS writes the JWK set of keys to path.
func WriteJWKS(t testing.TB, path string, keys ...*Key) {
	t.Helper()
	if err := os.WriteFile(path, JWKS(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Claims are Issuer, Audience, an exp an hour after now, and extra (which
// may replace any of them; a nil value removes one).
func Claims(now time.Time, extra map[string]any) map[string]any {
	c := map[string]any{"iss": Issuer, "aud": Audience, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	maps.Copy(c, extra)
	for k, v := range c {
		if v == nil {
			delete(c, k)
		}
	}
	return c
}

// Sign signs claims with k (ES256, its kid in the header).
func (k *Key) Sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.KID}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	obj, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Token signs the claims of a user: sub and, unless empty, plan.
func (k *Key) Token(t testing.TB, sub, plan string) string {
	extra := map[string]any{"sub": sub}
	if plan != "" {
		extra["plan"] = plan
	}
	return k.Sign(t, Claims(time.Now(), extra))
}

// None is an unsigned token (alg none) carrying claims and kid.
func None(kid string, claims map[string]any) string {
	return raw(map[string]any{"alg": "none", "kid": kid}, claims) + "."
}

// HS256 is a token signed with HMAC-SHA256 keyed by secret (say, the
// public key's JWK or PEM: the algorithm confusion attack).
func HS256(kid string, secret []byte, claims map[string]any) string {
	head := raw(map[string]any{"alg": "HS256", "kid": kid, "typ": "JWT"}, claims)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(head))
	return head + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// PublicJSON is the public JWK of k as JSON: what an attacker knows.
func (k *Key) PublicJSON() []byte {
	b, _ := json.Marshal(k.JWK())
	return b
}

func raw(header, claims map[string]any) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
}
