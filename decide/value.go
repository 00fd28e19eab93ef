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
	"sync/atomic"
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

// maskSecret keys the digests MaskValue shows. It is drawn once per
// process: masks tell values apart within one process's logs and status
// page, and cannot be reversed by trying likely values (addresses,
// e-mails) without it.
var maskSecret = func() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}()

// maskPrefix starts every mask; 12 hex digits follow it.
const (
	maskPrefix = "key#"
	maskLen    = len(maskPrefix) + 12
)

// MaskValue returns what logs, status pages and the CLI show of one value
// of a key by default: "key#" and 12 hex digits of a digest of it keyed by
// a secret drawn when the process starts. Keys hold what clients send
// (addresses, API tokens, e-mail addresses); a mask lets an operator see
// that one client is refused again and again, and name it to sluice keys
// inspect or reset (Unmask), without the value being written anywhere. The
// same value gets the same mask for the life of the process, whatever
// limit it is counted under; another process shows other masks.
func MaskValue(v string) string {
	var sum [sha256.Size]byte
	digest(v, &sum)
	var out [maskLen]byte
	copy(out[:], maskPrefix)
	hex.Encode(out[len(maskPrefix):], sum[:6])
	if i := shownSlot(sum[:]); !remembered(i, v) {
		remember(i, v)
	}
	return string(out[:])
}

// remembered reports whether slot i of shown holds v: a value masked
// again costs no allocation.
func remembered(i int, v string) bool {
	p := shown[i].Load()
	return p != nil && *p == v
}

// remember puts v in slot i of shown.
func remember(i int, v string) { shown[i].Store(&v) }

// Unmask returns the value whose mask (MaskValue) is m, when this process
// has shown it lately: the last shownSlots values masked are remembered,
// one per slot, so that a mask copied from a log line or the status page
// names its value. ok is false for a mask this process has not shown, or
// no longer remembers.
func Unmask(m string) (v string, ok bool) {
	if !IsMask(m) {
		return "", false
	}
	var want [6]byte
	if _, err := hex.Decode(want[:], []byte(m[len(maskPrefix):])); err != nil {
		return "", false
	}
	p := shown[shownSlot(want[:])].Load()
	if p == nil {
		return "", false
	}
	var sum [sha256.Size]byte
	digest(*p, &sum)
	if string(sum[:6]) != string(want[:]) {
		return "", false
	}
	return *p, true
}

// IsMask reports whether s has the form of a mask: "key#" and 12 lower-case
// hex digits.
func IsMask(s string) bool {
	if len(s) != maskLen || !strings.HasPrefix(s, maskPrefix) {
		return false
	}
	for _, c := range s[len(maskPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// digest writes v's keyed digest to sum.
func digest(v string, sum *[sha256.Size]byte) {
	m := maskers.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, v)
	m.Sum(sum[:0])
	maskers.Put(m)
}

// maskers keeps keyed digests for MaskValue: a refused request is masked
// on the status page's path, and a new one costs two digests and their
// pads.
var maskers = sync.Pool{New: func() any { return hmac.New(sha256.New, maskSecret) }}

// shown remembers, per slot chosen by a mask's first 12 bits, the value
// masked last: a bounded table (at most shownSlots values of at most
// MaxKeyValue bytes each), which many values masked at once can only
// overwrite.
var shown [shownSlots]atomic.Pointer[string]

const shownSlots = 1 << 12

func shownSlot(sum []byte) int { return (int(sum[0])<<4 | int(sum[1])>>4) % shownSlots }

// ShowValue returns one value of a key as logs and status pages show it:
// its mask (MaskValue), or, when show is set, the value itself made
// printable and bounded (any byte outside printable ASCII escaped, at most
// maxShownValue bytes).
func ShowValue(v string, show bool) string {
	if !show {
		return MaskValue(v)
	}
	return printable(v)
}

// maxShownValue bounds the bytes of a value shown in clear.
const maxShownValue = 200

// printable shows a value (which may hold any bytes) as text, bounded in
// length.
func printable(v string) string {
	cut := len(v) > maxShownValue
	if cut {
		v = v[:maxShownValue]
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 0x20 && c < 0x7f:
			b = append(b, c)
		case c == 0:
			b = append(b, '|')
		default:
			b = append(b, `\x`...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
	}
	if cut {
		b = append(b, "…"...)
	}
	return string(b)
}

// KeyText is the one rendering of a key's values that every surface
// shows (refusal logs, the status page, sluice keys, observers): each
// value named by the part of the limit's key it comes from and shown by
// ShowValue ("ip=key#3f09a1c2d4e5 header:X-User=key#0b1c2d3e4f50"); a value
// of a global limit is the word global. Values without a name, or when
// names and values do not pair up, are named part1, part2, ...
func KeyText(names, values []string, show bool) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte(' ')
		}
		name := "part" + strconv.Itoa(i+1)
		if len(names) == len(values) {
			name = names[i]
		}
		if name == "global" {
			b.WriteString(name)
			continue
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(ShowValue(v, show))
	}
	return b.String()
}

// StoreKeyText renders a store key whose part names are not known: the
// values of a key AppendKey built whose first names parts name its source
// and limit (KeyText without names), or, for any other key, all of it as
// one value. httplimit and grpclimit build (limit, value) keys: names 1.
func StoreKeyText(key string, names int, show bool) string {
	parts, ok := KeyParts(key)
	if !ok || len(parts) < names {
		return ShowValue(key, show)
	}
	return KeyText(nil, parts[names:], show)
}
