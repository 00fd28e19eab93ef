package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestShapingOverloadDoesNotStarve: a leaky_bucket of 2/s with a queue of 3
// (nginx's rate=2r/s burst=3) under 5.9 requests/s for 5s, behind the
// default MaxDelay of 1s. A request whose delay would exceed 1s is refused,
// and it must not keep its place: the middleware then serves two requests
// a second throughout. (It used to charge such a request and then refuse it, so every
// later request found the queue full of refused ones: 4 served, none after
// 0.68s.)
func TestShapingOverloadDoesNotStarve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		mw, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
			{Name: "shaped", Key: httplimit.Global, Limit: sluice.LeakyBucket(sluice.PerSecond(2), 3)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var served []time.Duration // arrival times of the requests served
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var wg sync.WaitGroup
		for i := range 30 {
			at := time.Duration(i) * 10 * time.Second / 59 // 5.9/s
			wg.Go(func() {
				time.Sleep(at)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				if rec.Code == http.StatusOK {
					mu.Lock()
					served = append(served, at)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// Reference: requests start 500ms apart, and one is served if it
		// starts within 1s of its arrival (the queue alone would allow
		// 1.5s); a refused one takes no place.
		var want []time.Duration
		next := time.Duration(0)
		for i := range 30 {
			at := time.Duration(i) * 10 * time.Second / 59
			if start := max(next, at); start-at <= time.Second {
				want, next = append(want, at), start+500*time.Millisecond
			}
		}
		slices.Sort(served)
		if !slices.Equal(served, want) {
			t.Fatalf("served %d of 30 arriving at %v\nwant %d arriving at %v", len(served), served, len(want), want)
		}
		if last := served[len(served)-1]; last < 4500*time.Millisecond {
			t.Fatalf("the last request served arrived at %s: the shaper starved afterwards", last)
		}
	})
}
