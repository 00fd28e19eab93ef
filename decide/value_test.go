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
	if got := decide.StoreKeyText(key, 2, true); got != "part1=127.0.0.1 part2=" {
		t.Fatalf("StoreKeyText = %q", got)
	}
	for _, bad := range []string{"x", "3:ab", "-1:", ":a", "99999:a"} {
		if _, ok := decide.KeyParts(bad); ok {
			t.Errorf("KeyParts(%q) accepted", bad)
		}
	}
}

// TestMaskValue: a mask hides the value, is stable for a value, differs
// between values, and names its value back (Unmask) once shown; a string
// that is not a mask shown by this process names nothing.
func TestMaskValue(t *testing.T) {
	m1 := decide.MaskValue("secret-token-123")
	if strings.Contains(m1, "secret") || !decide.IsMask(m1) {
		t.Fatalf("mask %q", m1)
	}
	if decide.MaskValue("secret-token-123") != m1 || decide.MaskValue("secret-token-124") == m1 {
		t.Fatal("masks are not stable per value, or two values share one")
	}
	if v, ok := decide.Unmask(m1); !ok || v != "secret-token-123" {
		t.Fatalf("Unmask(%q) = %q, %t", m1, v, ok)
	}
	for _, bad := range []string{"key#000000000000", "key#ABCDEF012345", "key#0123", "secret-token-123", ""} {
		if bad == m1 {
			continue
		}
		if v, ok := decide.Unmask(bad); ok {
			t.Errorf("Unmask(%q) = %q", bad, v)
		}
	}
}

// TestKeyText: one rendering of a key's values, masked per value, so that
// the same value reads the same under every limit and in every surface.
func TestKeyText(t *testing.T) {
	ip := decide.MaskValue("203.0.113.7")
	if got := decide.KeyText([]string{"ip", "header:X-User"}, []string{"203.0.113.7", "ann"}, false); got != "ip="+ip+" header:X-User="+decide.MaskValue("ann") {
		t.Fatalf("masked: %q", got)
	}
	if got := decide.KeyText([]string{"ip"}, []string{"a\nb\x00"}, true); got != `ip=a\xab|` {
		t.Fatalf("shown: %q", got)
	}
	if got := decide.KeyText(nil, []string{strings.Repeat("x", 300)}, true); got != "part1="+strings.Repeat("x", 200)+"…" {
		t.Fatalf("a long value shown: %q", got)
	}
	if got := decide.KeyText([]string{"global"}, []string{"*"}, false); got != "global" {
		t.Fatalf("global: %q", got)
	}
	key := string(decide.AppendKey(nil, "api", "per-ip", "203.0.113.7"))
	if got := decide.StoreKeyText(key, 2, false); got != "part1="+ip {
		t.Fatalf("StoreKeyText = %q", got)
	}
	if got := decide.StoreKeyText("not a key", 1, false); got != decide.MaskValue("not a key") {
		t.Fatalf("StoreKeyText of another key = %q", got)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
