package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/memstore"
)

// TestRefusalsLoggedAggregated: 2,000 refused requests make one log line
// with their counts, written at the end of the interval, not 2,000 lines.
func TestRefusalsLoggedAggregated(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	defer mem.Close()
	var logs logtest.Buffer
	mw, err := httplimit.New(sluice.New(mem), httplimit.Config{
		Limits: []httplimit.Limit{{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.FixedWindow(1, time.Hour)}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	refused := 0
	began := time.Now()
	for i := range 2_020 {
		r := httptest.NewRequest("GET", "/", nil)
		user := "mallory"
		if i%101 == 0 {
			user = "u" + string(rune('a'+i/101)) // 20 more users, admitted once each
		}
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == 429 {
			refused++
		}
	}
	took := time.Since(began)
	if refused != 1999 {
		t.Fatalf("%d refused, want 1999 (mallory's all but the first)", refused)
	}
	// The last interval's line comes when it ends.
	deadline := time.Now().Add(5 * time.Second)
	total := func(out string) (n int) {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v int
			if _, after, ok := strings.Cut(line, " refused="); ok {
				fmt.Sscan(after, &v)
			}
			n += v
		}
		return n
	}
	for total(logs.String()) < refused && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	// Keys are masked: the line tells one key is refused again and again
	// without writing what the client sent.
	mallory := `top_keys.1.key="part1=` + decide.MaskValue("mallory") + `"`
	if strings.Contains(out, "mallory") {
		t.Errorf("the log shows a key value: %s", out)
	}
	// One line per interval (1 s), however many refusals: on a fast machine
	// the loop fits in one interval and makes one line; on a loaded one a
	// few, never one per request.
	lines := strings.Count(out, "\n")
	if max := int(took/time.Second) + 2; lines < 1 || lines > max {
		t.Fatalf("%d log lines for %d refusals in %v (at most %d): %s", lines, refused, took, max, out)
	}
	if got := total(out); got != refused {
		t.Errorf("the lines count %d refusals, want %d: %s", got, refused, out)
	}
	if !strings.Contains(out, `msg="httplimit: refused requests"`) || !strings.Contains(out, mallory) {
		t.Errorf("log lines lack the message or mallory as the top key: %s", out)
	}
	if lines == 1 {
		for _, want := range []string{" refused=1999 ", "by_limit.per-user=1999", mallory + " top_keys.1.refused=1999"} {
			if !strings.Contains(out, want) {
				t.Errorf("log line lacks %q: %s", want, out)
			}
		}
	}
}

// waitSource plans one global limit whose action waits.
type waitSource struct{ limit sluice.Limit }

func (s waitSource) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	return append(dst, decide.Check{Name: "g", Key: "g", Limit: s.limit, Cost: 1,
		Action: &decide.Action{Wait: true, MaxDelay: time.Minute}}), nil
}

// TestWaitingBounded: a flood of requests that would each wait (a shaping
// delay, or an Action.Wait for the window to reopen) cannot pile up: at most
// MaxWaiting of them wait, the rest are refused at once, and when the
// clients go away nothing is left behind.
func TestWaitingBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
	}{
		{"shaping delay", httplimit.Config{
			Limits:   []httplimit.Limit{{Name: "g", Key: httplimit.Global, Limit: sluice.LeakyBucket(sluice.PerSecond(1), 1000)}},
			MaxDelay: time.Hour,
		}},
		{"action wait", httplimit.Config{Source: waitSource{sluice.FixedWindow(1, 30*time.Second)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, _ := memstore.New(memstore.Config{})
			defer mem.Close()
			tc.cfg.MaxWaiting = 10
			mw, err := httplimit.New(sluice.New(mem), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			goroutines := runtime.NumGoroutine()
			const flood = 200
			codes := make(chan int, flood+1)
			serve := func() {
				r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				codes <- w.Code
			}
			serve() // takes the window or the bucket's first place
			if c := <-codes; c != 200 {
				t.Fatalf("first request: %d", c)
			}
			for range flood {
				go serve()
			}
			refused := 0
			timeout := time.After(10 * time.Second)
			for refused < flood-10 {
				select {
				case c := <-codes:
					if c != 429 {
						t.Fatalf("a flooding request answered %d", c)
					}
					refused++
				case <-timeout:
					t.Fatalf("only %d of %d refused at once", refused, flood)
				}
			}
			select {
			case c := <-codes:
				t.Fatalf("more than MaxWaiting answered before their wait: %d", c)
			case <-time.After(100 * time.Millisecond):
			}
			cancel() // the waiting clients go away
			for range 10 {
				<-codes
			}
			for i := 0; runtime.NumGoroutine() > goroutines && i < 100; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > goroutines {
				t.Fatalf("%d goroutines left, %d before", n, goroutines)
			}
		})
	}
}
