package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxKeyValue is the longest value taken from a request (a header, query
// parameter, cookie, host or method, or what a KeyFunc returns) that is kept
// as it is in a key. Longer values are replaced by their digest (see
// KeyValue), so no client can make a store hold arbitrarily long keys.
const MaxKeyValue = 256

// DigestPrefix starts every value KeyValue replaced by its digest.
const DigestPrefix = "sha256:"

// KeyValue returns the form of a request-supplied value that goes into a
// store key: v itself when it is at most MaxKeyValue bytes long and does not
// start with DigestPrefix, and otherwise DigestPrefix followed by the 64 hex
// digits of v's SHA-256 digest (71 bytes in all).
//
// It is the one place where values from requests are bounded: the
// middleware passes every key a Config.Limits KeyFunc returns through it,
// and package policy every part of every key. Call it yourself only in a
// Source of your own.
//
// The mapping is one-to-one in practice, so two clients never share a key
// by accident or by design:
//
//   - A value kept as it is never starts with DigestPrefix, and a digest
//     always does, so a short value cannot be written to equal the digest
//     of a long one (a value that starts with DigestPrefix is hashed too).
//   - Two long values share a digest only through a SHA-256 collision,
//     which no one knows how to find. The hash is unkeyed on purpose:
//     every instance sharing a Redis store must turn the same value into
//     the same key, and a per-process secret key would break that, while a
//     keyed non-cryptographic hash with a shared key would only be as safe
//     as the key. Hashing costs about 1 µs per KB of value, paid only by
//     requests that send long values.
func KeyValue(v string) string {
	if len(v) <= MaxKeyValue && !strings.HasPrefix(v, DigestPrefix) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	var b [len(DigestPrefix) + 2*sha256.Size]byte
	copy(b[:], DigestPrefix)
	hex.Encode(b[len(DigestPrefix):], sum[:])
	return string(b[:])
}
