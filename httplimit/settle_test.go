package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// tokenHandler answers like an LLM service that reports the tokens a call
// used, in the way ?report= says: a header, an announced trailer, an
// unannounced trailer (http.TrailerPrefix), nothing, or through a hijacked
// connection. ?used= is the count. It records whether the writer it got
// still offers http.Flusher and http.Hijacker.
func tokenHandler(flusher, hijacker *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, f := w.(http.Flusher)
		_, h := w.(http.Hijacker)
		flusher.Store(f)
		hijacker.Store(h)
		used := r.URL.Query().Get("used")
		// http.ResponseController reaches the connection through Unwrap.
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			http.Error(w, "SetWriteDeadline: "+err.Error(), 500)
			return
		}
		switch r.URL.Query().Get("report") {
		case "header":
			w.Header().Set("X-Tokens-Used", used)
			io.WriteString(w, "answer")
		case "trailer":
			w.Header().Set("Trailer", "X-Tokens-Used")
			io.WriteString(w, "ans")
			http.NewResponseController(w).Flush()
			io.WriteString(w, "wer")
			w.Header().Set("X-Tokens-Used", used)
		case "unannounced":
			io.WriteString(w, "answer")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", used)
		case "late-header": // set after the headers went out: never sent, not counted
			io.WriteString(w, "answer")
			w.Header().Set("X-Tokens-Used", used)
		case "hijack":
			w.Header().Set("X-Tokens-Used", used)
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nanswer")
			buf.Flush()
		default:
			io.WriteString(w, "answer")
		}
	})
}

// settleServer runs httplimit with a per-user token budget (2,000 an hour,
// each call reserving 100, reporting at most 500) in front of
// tokenHandler, on a store whose clock stands still. done receives once
// the middleware has returned, its settle done.
func settleServer(t *testing.T, http2, strip bool) (srv *httptest.Server, remaining func() int64, done chan struct{}, flusher, hijacker *atomic.Bool) {
	t.Helper()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limiter := sluice.New(store)
	budget := sluice.FixedWindow(2000, time.Hour)
	mw, err := httplimit.New(limiter, httplimit.Config{Limits: []httplimit.Limit{{
		Name: "tokens", Key: httplimit.Global, Limit: budget, Reserve: 100,
		Late: &decide.LateCost{Header: "X-Tokens-Used", Max: 500, Strip: strip},
	}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	flusher, hijacker = new(atomic.Bool), new(atomic.Bool)
	inner := mw(tokenHandler(flusher, hijacker))
	done = make(chan struct{}, 64) // room for every call of a test in flight
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		inner.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = http2
	if http2 {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	key := string(decide.AppendKey(nil, "tokens", "global"))
	remaining = func() int64 {
		d, err := limiter.AllowN(context.Background(), key, budget, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	return srv, remaining, done, flusher, hijacker
}

// TestSettleFromResponse: the middleware charges what the handler reports,
// in a header or a trailer, over HTTP/1.1 (chunked trailers) and HTTP/2,
// bounded by Max; a missing, late or malformed report keeps the
// reservation; with Strip the client never sees the report.
func TestSettleFromResponse(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			srv, remaining, done, flusher, hijacker := settleServer(t, proto == "HTTP/2", true)
			steps := []struct {
				report, used string
				charged      int64
			}{
				{"header", "250", 250},
				{"trailer", "40", 40},
				{"unannounced", "0", 0},
				{"header", "9000", 500}, // above Max: charged Max
				{"none", "", 100},       // missing: the reservation
				{"header", "12.5", 100}, // malformed: missing
				{"late-header", "300", 100},
			}
			if proto == "HTTP/1.1" {
				steps = append(steps, struct {
					report, used string
					charged      int64
				}{"hijack", "70", 70})
			}
			left := int64(2000)
			for _, s := range steps {
				resp, err := srv.Client().Get(srv.URL + "/?report=" + s.report + "&used=" + s.used)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				<-done
				if string(body) != "answer" || resp.Proto[:6] != proto[:6] {
					t.Fatalf("%s: %s %q", s.report, resp.Proto, body)
				}
				if v := resp.Header.Get("X-Tokens-Used") + resp.Trailer.Get("X-Tokens-Used"); v != "" && s.report != "hijack" {
					t.Errorf("%s: the client saw the cost %q despite Strip", s.report, v)
				}
				if left -= s.charged; remaining() != left {
					t.Errorf("%s %s: %d remaining, want %d", s.report, s.used, remaining(), left)
				}
			}
			if !flusher.Load() || hijacker.Load() != (proto == "HTTP/1.1") {
				t.Errorf("the handler's writer: Flusher %v, Hijacker %v", flusher.Load(), hijacker.Load())
			}
		})
	}
}

// TestSettleKeepsHeaderWithoutStrip: without Strip the client sees the
// cost header and trailer the handler sent.
func TestSettleKeepsHeaderWithoutStrip(t *testing.T) {
	srv, remaining, done, _, _ := settleServer(t, false, false)
	for _, report := range []string{"header", "trailer"} {
		resp, err := srv.Client().Get(srv.URL + "/?report=" + report + "&used=30")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		<-done
		if v := resp.Header.Get("X-Tokens-Used") + resp.Trailer.Get("X-Tokens-Used"); v != "30" {
			t.Errorf("%s: the client saw %q, want 30", report, v)
		}
	}
	if got := remaining(); got != 1940 {
		t.Errorf("%d remaining, want 1940", got)
	}
}

// TestSettleDebt: a call that used more than the budget had left is
// charged in full (into debt), and the next call is refused until the
// debt is paid back.
func TestSettleDebt(t *testing.T) {
	srv, remaining, done, _, _ := settleServer(t, false, true)
	for i, used := range []int{450, 450, 450, 450, 500} {
		resp, err := srv.Client().Get(srv.URL + "/?report=header&used=" + strconv.Itoa(used))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		<-done
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d", i, resp.StatusCode)
		}
	}
	if got := remaining(); got > 0 {
		t.Errorf("%d remaining after 2,300 of 2,000 used", got)
	}
	resp, err := srv.Client().Get(srv.URL + "/?report=header&used=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-done
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a call after the budget was spent: %d, want 429", resp.StatusCode)
	}
}

// BenchmarkSettle is the middleware's cost for a request whose cost the
// response reports (a reservation, the watched writer, the settle) against
// one whose cost is known up front, on memstore.
func BenchmarkSettle(b *testing.B) {
	for _, late := range []bool{false, true} {
		b.Run(map[bool]string{false: "up-front", true: "settled"}[late], func(b *testing.B) {
			store, _ := memstore.New(memstore.Config{})
			defer store.Close()
			l := httplimit.Limit{Name: "tokens", Key: httplimit.Global, Limit: sluice.TokenBucket(sluice.PerSecond(1e9), 1e9)}
			if late {
				l.Reserve, l.Late = 100, &decide.LateCost{Header: "X-Tokens-Used", Strip: true}
			}
			mw, _ := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{l}})
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Tokens-Used", "250")
				w.WriteHeader(200)
			}))
			r := httptest.NewRequest("GET", "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

// TestSettleConcurrent: calls in flight at once each reserve, then settle
// what they used; the budget ends charged exactly the sum of what they
// reported, and calls admitted while others were in flight overran it by
// at most their underestimates.
func TestSettleConcurrent(t *testing.T) {
	srv, remaining, done, _, _ := settleServer(t, false, true)
	const n = 12 // 12 × 100 reserved fits the 2,000; 12 × up to 300 used does too
	var wg sync.WaitGroup
	var sum atomic.Int64
	for i := range n {
		used := int64(37*i%300 + 1)
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL + "/?report=trailer&used=" + strconv.FormatInt(used, 10))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				sum.Add(used)
			}
		})
	}
	wg.Wait()
	for range n {
		<-done
	}
	if got, want := remaining(), 2000-sum.Load(); got != want {
		t.Errorf("%d left after calls that used %d in all, want %d", got, sum.Load(), want)
	}
}

// TestLateConfigErrors: New refuses a Late it could not honour, saying
// what to change.
func TestLateConfigErrors(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	budget := sluice.FixedWindow(100, time.Minute)
	for _, tc := range []struct {
		l    httplimit.Limit
		want string
	}{
		{httplimit.Limit{Reserve: 5}, "Reserve applies only with Late"},
		{httplimit.Limit{Late: &decide.LateCost{Header: "X Cost"}}, `Late.Header "X Cost" is not a header name`},
		{httplimit.Limit{Late: &decide.LateCost{Header: strings.Repeat("X", 129)}}, "is not a header name"}, // 128 bytes at most
		{httplimit.Limit{Reserve: 101, Late: &decide.LateCost{Header: "X-Cost"}}, "the reservation must be between 0 and the limit's capacity 100 (got 101)"},
		{httplimit.Limit{Reserve: 10, Late: &decide.LateCost{Header: "X-Cost", Max: 5}}, "Max must be 0 (the capacity) or at least the reservation 10 (got 5)"},
		{httplimit.Limit{Reserve: 10, Late: &decide.LateCost{Header: "X-Cost", Max: 411}}, "Max must be at most 410"},
		{httplimit.Limit{Limit: sluice.Concurrency(2, time.Minute), Late: &decide.LateCost{Header: "X-Cost"}}, "concurrency cannot settle"},
	} {
		l := tc.l
		l.Name, l.Key = "tokens", httplimit.Global
		if l.Limit == (sluice.Limit{}) {
			l.Limit = budget
		}
		_, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{l}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}
