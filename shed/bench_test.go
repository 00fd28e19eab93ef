package shed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkAcquireDone is the cost of one admitted request: Acquire, then
// Done (a latency sample), from every core at once.
func BenchmarkAcquireDone(b *testing.B) {
	l, err := New(Config{InitialLimit: 1000, MaxLimit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			tok, err := l.Acquire(ctx, Default)
			if err != nil {
				b.Fatal(err)
			}
			tok.Done()
		}
	})
}

// BenchmarkMiddlewareShed is the cost of refusing a request: the limit is
// full, so each one is answered 503.
func BenchmarkMiddlewareShed(b *testing.B) {
	l, _ := New(Config{InitialLimit: 1, MinLimit: 1, CriticalWait: -1})
	l.Acquire(context.Background(), Default) // the only slot, held
	h := l.Middleware(nil)(http.NotFoundHandler())
	r := httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
}
