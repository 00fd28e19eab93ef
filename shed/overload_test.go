package shed

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// simService is a service with a capacity of c requests at once: up to c
// in flight, a request takes base (plus up to 20% jitter); beyond c they
// share it, and each takes n/c times as long (throughput stays c/base).
type simService struct {
	c        int64
	base     time.Duration
	inflight atomic.Int64
	mu       sync.Mutex
	rng      *rand.Rand
	// meant and slept add up how long requests meant to take and took:
	// on the real clock of a loaded machine, sleeps overrun.
	meant, slept atomic.Int64
}

func (s *simService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	s.mu.Lock()
	jitter := 1 + 0.2*s.rng.Float64()
	s.mu.Unlock()
	d := time.Duration(float64(s.base) * max(1, float64(n)/float64(s.c)) * jitter)
	t0 := time.Now()
	time.Sleep(d)
	s.slept.Add(int64(time.Since(t0)))
	s.meant.Add(int64(d))
}

// cpu reads the simulated service's CPU time, as if it were CPU-bound: it
// uses min(1, in flight / c) of one CPU, as sampled at each read.
func (s *simService) cpu() CPUReader {
	var used time.Duration
	var last time.Time
	return func() (time.Duration, float64, bool) {
		now := time.Now()
		if !last.IsZero() {
			used += time.Duration(float64(now.Sub(last)) * min(1, float64(s.inflight.Load())/float64(s.c)))
		}
		last = now
		return used, 1, true
	}
}

// capacity is the service's throughput in requests per second (the mean
// jitter is 10%).
func (s *simService) capacity() float64 { return float64(s.c) / (1.1 * s.base.Seconds()) }

// result is one request as the load generator saw it.
type result struct {
	p       Priority
	status  int
	latency time.Duration
	at      time.Duration // since the phase began
}

// offer sends Poisson arrivals at rate per second for d, each through do
// (which returns the status it was answered with), a tenth critical, the
// rest default and sheddable in equal parts; it returns once every request
// has been answered.
func offer(do func(Priority) int, rate float64, d time.Duration, seed uint64) []result {
	rng := rand.New(rand.NewPCG(seed, 1))
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	start := time.Now()
	for next := start; time.Since(start) < d; {
		p := Sheddable
		switch x := rng.Float64(); {
		case x < 0.1:
			p = Critical
		case x < 0.55:
			p = Default
		}
		wg.Go(func() {
			t0 := time.Now()
			code := do(p)
			res := result{p: p, status: code, latency: time.Since(t0), at: t0.Sub(start)}
			mu.Lock()
			out = append(out, res)
			mu.Unlock()
		})
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(next)) // on schedule even when the machine is slow
	}
	wg.Wait()
	return out
}

// direct calls h in process, as if through a trusted proxy that sets
// Sluice-Priority.
func direct(h http.Handler) func(Priority) int {
	return func(p Priority) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4711"
		r.Header.Set("Sluice-Priority", p.String())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
}

// summary is what a phase measured after its first `skip`.
type summary struct {
	p99            time.Duration
	goodput        float64 // answered 200 per second
	success        [nPriorities]float64
	admitted, shed int
}

func summarize(rs []result, skip, d time.Duration) summary {
	var s summary
	var ok []time.Duration
	var n, good [nPriorities]int
	for _, r := range rs {
		if r.at < skip {
			continue
		}
		n[r.p]++
		if r.status == http.StatusOK {
			good[r.p]++
			ok = append(ok, r.latency)
		} else {
			s.shed++
		}
	}
	slices.Sort(ok)
	if len(ok) > 0 {
		s.p99 = ok[len(ok)*99/100]
	}
	s.admitted = len(ok)
	s.goodput = float64(len(ok)) / (d - skip).Seconds()
	for p := range n {
		if n[p] > 0 {
			s.success[p] = float64(good[p]) / float64(n[p])
		}
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("p99 %v, goodput %.0f/s, success critical %.2f%% default %.2f%% sheddable %.2f%% (%d admitted, %d shed)",
		s.p99.Round(time.Millisecond), s.goodput, 100*s.success[Critical], 100*s.success[Default], 100*s.success[Sheddable], s.admitted, s.shed)
}

// TestOverload offers a simulated service three times its capacity, on
// synctest's clock: with shedding, the p99 latency of the requests served
// stays within twice the unloaded p99, goodput within 10% of capacity,
// critical requests keep 99% success, and sheddable ones are shed first.
// Below capacity nothing is shed. BBR runs with a CPU gate at 80% whose
// usage is the simulated service's (in flight / capacity, at most 1).
// Without shedding the p99 is far beyond twice the unloaded one.
func TestOverload(t *testing.T) {
	for _, alg := range []string{"gradient2", "vegas", "bbr"} {
		t.Run(alg, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := &simService{c: 20, base: 100 * time.Millisecond, rng: rand.New(rand.NewPCG(7, 7))}
				cfg := Config{Algorithm: &Vegas{}}
				switch alg {
				case "gradient2":
					cfg.Algorithm = &Gradient2{}
				case "bbr":
					cfg.Algorithm, cfg.CPUThreshold, cfg.CPU = &BBR{}, 0.8, svc.cpu()
				}
				overload(t, svc, newLimiter(t, cfg))
			})
		})
	}
	t.Run("without shedding", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			svc := &simService{c: 20, base: 100 * time.Millisecond, rng: rand.New(rand.NewPCG(7, 7))}
			calm := summarize(offer(direct(svc), svc.capacity()/2, 3*time.Second, 1), time.Second, 3*time.Second)
			load := summarize(offer(direct(svc), 3*svc.capacity(), 5*time.Second, 2), time.Second, 5*time.Second)
			t.Logf("unloaded %v; at 3x for 5s: %v", calm, load)
			if load.p99 < 5*calm.p99 {
				t.Errorf("without shedding the p99 at 3x is %v, not even 5 times the unloaded %v", load.p99, calm.p99)
			}
		})
	})
}

// overload runs TestOverload's two phases against l and checks the bounds.
func overload(t *testing.T, svc *simService, l *Limiter) {
	t.Helper()
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	h := l.Middleware(HeaderPriority("Sluice-Priority", trusted))(svc)
	calm := summarize(offer(direct(h), svc.capacity()/2, 3*time.Second, 1), time.Second, 3*time.Second)
	load := summarize(offer(direct(h), 3*svc.capacity(), 20*time.Second, 2), 5*time.Second, 20*time.Second)
	t.Logf("capacity %.0f/s; at half of it: %v", svc.capacity(), calm)
	t.Logf("at 3x: %v; limit %+v", load, l.Stats())
	if calm.shed > 0 {
		t.Errorf("%d requests shed at half the capacity", calm.shed)
	}
	if load.p99 > 2*calm.p99 {
		t.Errorf("p99 at 3x capacity %v, more than twice the unloaded %v", load.p99, calm.p99)
	}
	if load.goodput < 0.9*svc.capacity() {
		t.Errorf("goodput %.0f/s, under 90%% of the capacity %.0f/s", load.goodput, svc.capacity())
	}
	if load.success[Critical] < 0.99 {
		t.Errorf("critical success %.2f%%, want at least 99%%", 100*load.success[Critical])
	}
	if load.success[Sheddable] >= load.success[Default] {
		t.Errorf("sheddable success %.2f%% not under default %.2f%%", 100*load.success[Sheddable], 100*load.success[Default])
	}
}
