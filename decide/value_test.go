package decide_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
)

func TestKeyValue(t *testing.T) {
	long := strings.Repeat("x", decide.MaxKeyValue+1)
	for _, tc := range []struct {
		in, want string
	}{
		{"ann", "ann"},
		{"", ""},
		{strings.Repeat("x", decide.MaxKeyValue), strings.Repeat("x", decide.MaxKeyValue)},
		// echo -n xxx...x (257) | sha256sum
		{long, "sha256:" + sha256hex(long)},
		// A short value written to look like a digest is hashed too.
		{"sha256:" + sha256hex(long), "sha256:" + sha256hex("sha256:"+sha256hex(long))},
		{"sha256:", "sha256:" + sha256hex("sha256:")},
		{"SHA256:x", "SHA256:x"},
	} {
		if got := decide.KeyValue(tc.in); got != tc.want {
			t.Errorf("KeyValue(%.20q...) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := decide.KeyValue(strings.Repeat("y", 1<<20)); len(got) != 71 {
		t.Errorf("a megabyte value: key of %d bytes, want 71", len(got))
	}
}

// FuzzKeyValue: distinct values never share a key, a key is never longer
// than MaxKeyValue, and short plain values are kept as they are.
func FuzzKeyValue(f *testing.F) {
	long := strings.Repeat("x", decide.MaxKeyValue+1)
	f.Add("ann", "bob")
	f.Add(long, "sha256:"+sha256hex(long))
	f.Add(long, long+"y")
	f.Add("sha256:", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := decide.KeyValue(a), decide.KeyValue(b)
		if a != b && ka == kb {
			t.Fatalf("%q and %q share the key %q", a, b, ka)
		}
		if a == b && ka != kb {
			t.Fatalf("%q keyed two ways", a)
		}
		if len(ka) > decide.MaxKeyValue {
			t.Fatalf("key of %d bytes", len(ka))
		}
		if len(a) <= decide.MaxKeyValue && !strings.HasPrefix(a, decide.DigestPrefix) && ka != a {
			t.Fatalf("short value %q keyed %q", a, ka)
		}
	})
}

// TestAppendKey: parts are bounded and length-prefixed, so lists of parts
// that differ never meet, and KeyParts reads them back.
func TestAppendKey(t *testing.T) {
	for _, pair := range [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"ab", ""}, {"a", "b"}},
		{{"1:x"}, {"", "x"}},
		{{strings.Repeat("z", 300)}, {decide.KeyValue(strings.Repeat("z", 300))}},
	} {
		a, b := string(decide.AppendKey(nil, pair[0]...)), string(decide.AppendKey(nil, pair[1]...))
		if a == b {
			t.Errorf("%q and %q share the key %q", pair[0], pair[1], a)
		}
	}
	key := string(decide.AppendKey(nil, "search", "per-ip", "127.0.0.1", ""))
	if key != "6:search6:per-ip9:127.0.0.10:" {
		t.Fatalf("key %q", key)
	}
	parts, ok := decide.KeyParts(key)
	if !ok || strings.Join(parts, "|") != "search|per-ip|127.0.0.1|" {
		t.Fatalf("KeyParts(%q) = %q, %t", key, parts, ok)
	}
	if got := decide.ShowKey(key); got != "search / per-ip / 127.0.0.1 / " {
		t.Fatalf("ShowKey = %q", got)
	}
	for _, bad := range []string{"x", "3:ab", "-1:", ":a", "99999:a"} {
		if _, ok := decide.KeyParts(bad); ok {
			t.Errorf("KeyParts(%q) accepted", bad)
		}
	}
}

// TestMaskKey: a mask hides the value, is stable for a key, and differs
// between keys.
func TestMaskKey(t *testing.T) {
	k1 := string(decide.AppendKey(nil, "api", "per-token", "secret-token-123"))
	k2 := string(decide.AppendKey(nil, "api", "per-token", "secret-token-124"))
	m1 := decide.MaskKey(k1)
	if strings.Contains(m1, "secret") || !strings.HasPrefix(m1, "key#") || len(m1) != len("key#")+12 {
		t.Fatalf("mask %q", m1)
	}
	if decide.MaskKey(k1) != m1 || decide.MaskKey(k2) == m1 {
		t.Fatal("masks are not stable per key, or two keys share one")
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
