package httplimit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func TestKeyValue(t *testing.T) {
	long := strings.Repeat("x", httplimit.MaxKeyValue+1)
	for _, tc := range []struct {
		in, want string
	}{
		{"ann", "ann"},
		{"", ""},
		{strings.Repeat("x", httplimit.MaxKeyValue), strings.Repeat("x", httplimit.MaxKeyValue)},
		// echo -n xxx...x (257) | sha256sum
		{long, "sha256:" + sha256hex(long)},
		// A short value written to look like a digest is hashed too.
		{"sha256:" + sha256hex(long), "sha256:" + sha256hex("sha256:"+sha256hex(long))},
		{"sha256:", "sha256:" + sha256hex("sha256:")},
		{"SHA256:x", "SHA256:x"},
	} {
		if got := httplimit.KeyValue(tc.in); got != tc.want {
			t.Errorf("KeyValue(%.20q...) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := httplimit.KeyValue(strings.Repeat("y", 1<<20)); len(got) != 71 {
		t.Errorf("a megabyte value: key of %d bytes, want 71", len(got))
	}
}

// FuzzKeyValue: distinct values never share a key, a key is never longer
// than MaxKeyValue, and short plain values are kept as they are.
func FuzzKeyValue(f *testing.F) {
	long := strings.Repeat("x", httplimit.MaxKeyValue+1)
	f.Add("ann", "bob")
	f.Add(long, "sha256:"+sha256hex(long))
	f.Add(long, long+"y")
	f.Add("sha256:", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := httplimit.KeyValue(a), httplimit.KeyValue(b)
		if a != b && ka == kb {
			t.Fatalf("%q and %q share the key %q", a, b, ka)
		}
		if a == b && ka != kb {
			t.Fatalf("%q keyed two ways", a)
		}
		if len(ka) > httplimit.MaxKeyValue {
			t.Fatalf("key of %d bytes", len(ka))
		}
		if len(a) <= httplimit.MaxKeyValue && !strings.HasPrefix(a, httplimit.DigestPrefix) && ka != a {
			t.Fatalf("short value %q keyed %q", a, ka)
		}
	})
}

// TestLongKeysAreLimited: a client that sends a header value longer than
// MaxKeyValue is limited under the value's digest, like any other client:
// the long value neither errors (which by default would admit it unlimited)
// nor is stored whole, and a second long value that differs only in its
// last byte is a different client.
func TestLongKeysAreLimited(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var errs int
	mw, err := httplimit.New(sluice.New(mem), httplimit.Config{
		Limits:  []httplimit.Limit{{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.FixedWindow(2, time.Hour)}},
		OnError: func(*http.Request, error) bool { errs++; return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(user string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	a := strings.Repeat("a", 100_000)
	b := a[:len(a)-1] + "b"
	for _, user := range []string{a, b} {
		for i, want := range []int{200, 200, 429} {
			if got := do(user); got != want {
				t.Fatalf("long user %q...: request %d answered %d, want %d", user[len(user)-3:], i, got, want)
			}
		}
	}
	if errs != 0 {
		t.Fatalf("%d key errors", errs)
	}
	if n := mem.Len(); n != 2 {
		t.Fatalf("store holds %d keys, want 2", n)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
