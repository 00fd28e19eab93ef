package httplimit_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/hostiletest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
)

// TestHostileMiddleware runs the adversarial table (internal/hostiletest)
// against the middleware enforcing each case's policy, in front of a
// handler that counts what reaches it, on a real server on loopback: on
// memstore and on a Redis server, the handler sees exactly what the limits
// allow, and every other request is answered with a 4xx.
func TestHostileMiddleware(t *testing.T) {
	for _, storeName := range []string{"memstore", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			for _, c := range hostiletest.Cases() {
				t.Run(c.Name, func(t *testing.T) {
					hostileMiddleware(t, storeName, c)
				})
			}
		})
	}
}

func hostileMiddleware(t *testing.T, storeName string, c hostiletest.Case[hostiletest.Request]) {
	var store sluice.Store
	if storeName == "memstore" {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		store = mem
	} else {
		red, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { red.Close() })
		store = red
	}
	note := ""
	if h := c.HoleOn("httplimit"); h != "" {
		note = " [" + h + "]"
	}
	pol, err := policy.Parse("hostile.yaml", []byte(c.Policy), policy.Options{})
	if err != nil {
		t.Fatalf("httplimit: the policy does not load%s: %s", note, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{Source: pol, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) })))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	hostiletest.Run(t, "httplimit", c, hostiletest.Sender[hostiletest.Request]{
		Send:     func(r hostiletest.Request) (int, error) { return hostiletest.Send(addr, r) },
		Pipeline: func(rs []hostiletest.Request) ([]int, error) { return hostiletest.Pipeline(addr, rs) },
		Through:  reached.Load,
	})
}

// TestHostileStaticLimits runs the cases of the adversarial table whose
// policy limits by client address or by X-User-ID against the middleware
// configured with Config.Limits instead (ByIP, ByHeader), on memstore.
func TestHostileStaticLimits(t *testing.T) {
	limits := map[string][]httplimit.Limit{
		hostiletest.PolicyIP:   {hostileIP(hostiletest.Burst)},
		hostiletest.PolicyUser: {hostileUser(hostiletest.Burst)},
	}
	for _, c := range hostiletest.Cases() {
		if ls := limits[c.Policy]; ls != nil {
			t.Run(c.Name, func(t *testing.T) { hostileStatic(t, "httplimit (Config.Limits)", c, ls) })
		}
	}
}

// TestHostileStacked runs the cases of the adversarial table whose policy
// limits by client address, by X-User-ID, or by both, against two
// middlewares stacked: per IP around per user, the limit a case does not
// name too loose to refuse. Stacked, they let through what one middleware
// with the case's limits does.
func TestHostileStacked(t *testing.T) {
	const loose = 1000
	limits := map[string][2]httplimit.Limit{
		hostiletest.PolicyIP:     {hostileIP(hostiletest.Burst), hostileUser(loose)},
		hostiletest.PolicyUser:   {hostileIP(loose), hostileUser(hostiletest.Burst)},
		hostiletest.PolicyUserIP: {hostileIP(8), hostileUser(hostiletest.Burst)},
	}
	for _, c := range hostiletest.Cases() {
		if ls, ok := limits[c.Policy]; ok {
			t.Run(c.Name, func(t *testing.T) { hostileStatic(t, "httplimit (stacked)", c, ls[:1], ls[1:]) })
		}
	}
}

// hostileIP and hostileUser are the table's limits per client address and
// per X-User-ID, with a burst of their own.
func hostileIP(burst int64) httplimit.Limit {
	return httplimit.Limit{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.TokenBucket(sluice.PerHour(1), burst)}
}

func hostileUser(burst int64) httplimit.Limit {
	return httplimit.Limit{Name: "per-user", Key: httplimit.ByHeader("X-User-ID"), Limit: sluice.TokenBucket(sluice.PerHour(1), burst)}
}

// hostileStatic runs case c against middlewares with the given limits on
// one memstore, the first outermost, in front of a handler that counts
// what reaches it, on a real server on loopback.
func hostileStatic(t *testing.T, front string, c hostiletest.Case[hostiletest.Request], limits ...[]httplimit.Limit) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var reached atomic.Int64
	var h http.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) })
	for i := len(limits) - 1; i >= 0; i-- {
		mw, err := httplimit.New(sluice.New(mem), httplimit.Config{Limits: limits[i], Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		h = mw(h)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	hostiletest.Run(t, front, c, hostiletest.Sender[hostiletest.Request]{
		Send:     func(r hostiletest.Request) (int, error) { return hostiletest.Send(addr, r) },
		Pipeline: func(rs []hostiletest.Request) ([]int, error) { return hostiletest.Pipeline(addr, rs) },
		Through:  reached.Load,
	})
}
