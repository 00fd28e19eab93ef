package shed

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/sched"
)

// TestOverloadRealClock is TestOverload on the real clock, over real HTTP
// on loopback: a service of capacity 20 at once and 200ms each, offered
// three times its capacity for 6 s. The bounds are the issue's, against
// what the same run measured: the p99 may exceed twice the unloaded p99
// by the longest a plain 10ms sleep overslept during the loaded phase (a
// stall of the machine's scheduler delays every request in flight), and
// the capacity the goodput is held to is the service's as it ran, its
// requests' sleeps overrunning as they did. A loaded phase during which
// the machine stalled a goroutine for longer than stalled (measured: 3 s at
// a load average of 16 on 2 cores) cannot be judged, since no bound
// derived from the service's own figures survives it: it is run again, up
// to three times, and the test is skipped, saying so, if every run
// stalled. TestOverload holds the same bounds on a fake clock whatever
// the machine does.
// stalled is the longest stall of the machine's scheduler under which a
// loaded phase of TestOverloadRealClock is judged: five times a request's
// 200ms, past which the latencies measure the machine, not the shedder.
const stalled = time.Second

func TestOverloadRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock load test")
	}
	svc := &simService{c: 20, base: 200 * time.Millisecond, rng: rand.New(rand.NewPCG(7, 7))}
	l := newLimiter(t, Config{})
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	srv := httptest.NewServer(l.Middleware(HeaderPriority("Sluice-Priority", trusted))(svc))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}, Timeout: 30 * time.Second}
	do := func(p Priority) int {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Sluice-Priority", p.String())
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	calm := summarize(offer(do, svc.capacity()/2, 4*time.Second, 1), time.Second, 4*time.Second)
	t.Logf("capacity %.0f/s; at half of it: %v", svc.capacity(), calm)
	var load summary
	var late time.Duration
	var capacity float64
	for run := 1; ; run++ {
		stop := sched.Lateness()
		svc.meant.Store(0)
		svc.slept.Store(0)
		load = summarize(offer(do, 3*svc.capacity(), 6*time.Second, 2), 2*time.Second, 6*time.Second)
		late = stop()
		capacity = svc.capacity() * float64(svc.meant.Load()) / float64(svc.slept.Load())
		t.Logf("at 3x, run %d: %v; limit %+v; a 10ms sleep overslept by up to %v; capacity as run %.0f/s", run, load, l.Stats(), late, capacity)
		if late <= stalled {
			break
		}
		if run == 3 {
			t.Skipf("the machine stalled a goroutine for %v (more than %v) in each of %d runs: too loaded to judge latency on the real clock", late, stalled, run)
		}
		time.Sleep(2 * time.Second) // let the shed requests' backlog drain
	}
	if load.p99 > 2*calm.p99+late {
		t.Errorf("p99 at 3x capacity %v, more than twice the unloaded %v plus the machine's longest lateness %v", load.p99, calm.p99, late)
	}
	if load.goodput < 0.9*capacity {
		t.Errorf("goodput %.0f/s, under 90%% of the capacity %.0f/s (as run)", load.goodput, capacity)
	}
	if load.success[Critical] < 0.99 {
		t.Errorf("critical success %.2f%%, want at least 99%%", 100*load.success[Critical])
	}
	if load.success[Sheddable] >= load.success[Default] {
		t.Errorf("sheddable success %.2f%% not under default %.2f%%", 100*load.success[Sheddable], 100*load.success[Default])
	}
}
