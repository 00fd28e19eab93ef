// Package jwtclaims verifies JSON Web Tokens (RFC 7519) against a key set
// (a JWKS file or URL, kept fresh) and yields their claims, so that a rate
// limit can follow who the caller is: a key made of a claim (jwt:sub), an
// override for a claim's value ({claim: plan, equals: pro, scale: 10}).
//
// Only a token whose signature, expiry (and nbf, iat), issuer and
// audience check out yields claims. Every other token (none, forged,
// expired, signed with alg "none" or with an algorithm not allowed, an
// unknown kid, the wrong audience, malformed, larger than the bound) is an
// error, and callers treat it as no claims at all: a claim nobody verified
// never keys a limit or grants an override.
//
// Defaults are the safe ones: asymmetric algorithms only (RS*, PS*, ES*,
// EdDSA; an HMAC algorithm only when Config.Algorithms names it, never
// "none"), tokens of at most 8 KiB, 30 s of clock leeway, and an exp claim
// required. A token with no kid is verified only against a key set of one
// key, so that a forged token costs one signature check, never one per key.
//
// The key set: a file is looked at again (one stat) at most once a second
// when tokens are verified, and read again when it changed; a URL is
// fetched (at most 1 MiB, within 5 s) when the Verifier is made, again
// every Refresh, and again, at most once per RetryAfter, when a token
// names a kid it does not hold (keys rotate without a restart). A read or
// fetch that fails keeps the last good set; fetches run in the background,
// never on a request's time.
//
// The JOSE library is github.com/go-jose/go-jose/v4: the maintained
// successor of square/go-jose used by Kubernetes, Dex and Caddy. It takes
// the allowed algorithms at parse time (so "none" and algorithm
// confusion are refused before any key is touched), checks the key's type
// against the algorithm, parses JWK sets, and has no dependency outside
// the standard library. golang-jwt/jwt was the alternative; it needs a
// separate JWKS library and leaves the algorithm check to a callback.
//
// A Verifier is safe for concurrent use. Verifying costs one signature
// check (tens of microseconds for RS256 and ES256) and a JSON decode of
// the payload; do it once per request and pass the claims along
// (NewContext, FromContext).
package jwtclaims
