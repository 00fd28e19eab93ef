package policy_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
)

// changePolicy writes a policy whose one limit (per X-User) is limitSpec,
// and returns a holder reading it and a function that rewrites it.
func changePolicy(t *testing.T, limitSpec string) (*policy.Holder, func(string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(spec string) {
		t.Helper()
		src := "rules:\n  - name: api\n    limits:\n      - {name: per-user, key: header:X-User, " + spec + "}\n"
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(limitSpec)
	h, err := policy.NewHolder(path, policy.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, func(spec string) {
		t.Helper()
		write(spec)
		if err := h.Reload(); err != nil {
			t.Fatal(err)
		}
	}
}

// changeSteps is a quota exhausted, then raised, lowered and reset: the
// limit after each reload, and how many of 5 requests it admits.
var changeSteps = map[string][]struct {
	spec string
	ok   int
}{
	"fixed_window": {
		{"algorithm: fixed_window, limit: 3, window: 1h", 3},
		{"algorithm: fixed_window, limit: 4, window: 1h", 1},             // 3 used of 4
		{"algorithm: fixed_window, limit: 2, window: 1h", 0},             // 4 used of 2
		{"algorithm: fixed_window, limit: 6, window: 2h", 2},             // a longer window keeps the count
		{"algorithm: fixed_window, limit: 6, window: 2h, version: 1", 5}, // a deliberate reset
	},
	"token_bucket": {
		{"algorithm: token_bucket, rate: 3/h, burst: 3", 3},
		{"algorithm: token_bucket, rate: 4/h, burst: 4", 1}, // 3 tokens used of 4
		{"algorithm: token_bucket, rate: 2/h, burst: 2", 0}, // capped: the bucket is empty
		{"algorithm: token_bucket, rate: 2/h, burst: 5", 3}, // 2 used of 5
	},
}

// TestReloadKeepsUsage: a user who spent a quota does not get it again
// when a reload changes the limit; raising it gives the difference,
// lowering it refuses, and only a new version starts afresh, on memstore
// and Redis, through the real middleware and policy reloads.
func TestReloadKeepsUsage(t *testing.T) {
	for name, store := range stores(t) {
		for alg, steps := range changeSteps {
			t.Run(name+"/"+alg, func(t *testing.T) {
				h, reload := changePolicy(t, steps[0].spec)
				srv := serveOn(t, store, h)
				for i, st := range steps {
					if i > 0 {
						reload(st.spec)
					}
					if ok, _ := count(t, 5, "GET", srv.URL, "X-User", "ann-"+alg); ok != st.ok {
						t.Fatalf("step %d, %s: %d of 5 admitted, want %d", i, st.spec, ok, st.ok)
					}
				}
			})
		}
	}
}

// TestRolloutOnOneRedis: two instances on one Redis during a rollout, one
// still on 3/h and one already on 4/h, read the same usage: after 3 on the
// old one, the new one admits 1 more and the old one none; when the new
// one lowers to 2/h, neither admits any.
func TestRolloutOnOneRedis(t *testing.T) {
	client, prefix := redistest.Standalone(t), redistest.Prefix(t)
	instance := func(spec string) (string, func(string)) {
		red, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { red.Close() })
		h, reload := changePolicy(t, spec)
		return serveOn(t, red, h).URL, reload
	}
	for _, alg := range []string{"fixed_window", "token_bucket"} {
		steps := changeSteps[alg]
		old, _ := instance(steps[0].spec)
		next, reload := instance(steps[1].spec)
		user := "bob-" + alg
		for i, st := range []struct {
			url    string
			n, ok  int
			reload string
		}{
			{url: old, n: 5, ok: 3},
			{url: next, n: 5, ok: 1},
			{url: old, n: 2, ok: 0},
			{url: next, n: 2, ok: 0, reload: steps[2].spec},
			{url: old, n: 2, ok: 0},
		} {
			if st.reload != "" {
				reload(st.reload)
			}
			if ok, _ := count(t, st.n, "GET", st.url, "X-User", user); ok != st.ok {
				t.Fatalf("%s step %d: %d of %d admitted, want %d", alg, i, ok, st.n, st.ok)
			}
		}
	}
}
