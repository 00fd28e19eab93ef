package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

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
		Limits: []httplimit.Limit{{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.FixedWindow(2, time.Hour)}},
		Observe: func(_ *http.Request, o decide.Observation) {
			if o.Err != nil {
				errs++
			}
		},
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
