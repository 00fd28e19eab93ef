package decide

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
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
// It is the one place where values from requests are bounded: AppendKey
// passes every part of every key through it, so a front-end that builds its
// keys with AppendKey cannot store a value longer than that.
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

// AppendKey appends to b the store key made of parts: each part bounded by
// KeyValue, then written with its length in front ("7:per-ip11:203.0.113.7"),
// so that no two different lists of parts make the same key ("a:b"+"c" and
// "a"+"b:c" stay apart). It is the one function that builds store keys from
// names and request values; the first parts are usually the names of the
// rule and the limit, which keeps the keys of different limits apart.
func AppendKey(b []byte, parts ...string) []byte {
	for _, p := range parts {
		b = AppendKeyPart(b, p)
	}
	return b
}

// AppendKeyPart appends one part of a key, as AppendKey does.
func AppendKeyPart(b []byte, part string) []byte {
	part = KeyValue(part)
	b = strconv.AppendInt(b, int64(len(part)), 10)
	b = append(b, ':')
	return append(b, part...)
}

// KeyParts splits a key AppendKey built into its parts. ok is false for a
// key AppendKey could not have built.
func KeyParts(key string) (parts []string, ok bool) {
	for key != "" {
		i := strings.IndexByte(key, ':')
		if i <= 0 || i > 4 {
			return nil, false
		}
		n, err := strconv.Atoi(key[:i])
		if err != nil || n < 0 || n > len(key)-i-1 {
			return nil, false
		}
		parts = append(parts, key[i+1:i+1+n])
		key = key[i+1+n:]
	}
	return parts, true
}

// maskSecret keys the digests MaskKey shows. It is drawn once per process:
// masks tell keys apart within one process's logs and status page, and
// cannot be reversed by trying likely values (addresses, e-mails) without it.
var maskSecret = func() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}()

// MaskKey returns what logs and status pages show of a store key by
// default: "key#" and 12 hex digits of a keyed digest of it. Keys hold what
// clients send (addresses, API tokens, e-mail addresses); a mask lets an
// operator see that one key is refused again and again, and which limit it
// is under (shown beside it), without writing the value anywhere. The same
// key gets the same mask for the life of the process.
func MaskKey(key string) string {
	m := maskers.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, key)
	var sum [sha256.Size]byte
	var out [4 + 12]byte
	copy(out[:], "key#")
	hex.Encode(out[4:], m.Sum(sum[:0])[:6])
	maskers.Put(m)
	return string(out[:])
}

// maskers keeps keyed digests for MaskKey: a refused request is masked on
// the status page's path, and a new one costs two digests and their pads.
var maskers = sync.Pool{New: func() any { return hmac.New(sha256.New, maskSecret) }}

// ShowKey returns a store key as people read it: the parts of a key
// AppendKey built joined by " / " (rule / limit / values), or the key as it
// is. Use it only where an operator has asked to see key values.
func ShowKey(key string) string {
	if parts, ok := KeyParts(key); ok && len(parts) > 0 {
		return strings.Join(parts, " / ")
	}
	return key
}
