// Package reloadtest helps the tests that land a policy reload in the
// middle of a request, to show the request keeps the policy it arrived
// under (server/gateway, server/api).
package reloadtest

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Parse parses a policy or fails the test.
func Parse(t testing.TB, name, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(yaml), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// HookStore runs Hook before its first Take or TakeAll: after a request
// is planned, before it is decided and answered.
type HookStore struct {
	sluice.Store
	Hook func()
	once sync.Once
}

// Take runs Hook the first time, then the store's Take.
func (s *HookStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.once.Do(s.Hook)
	return s.Store.Take(ctx, r)
}

// TakeAll runs Hook the first time, then the store's TakeAll.
func (s *HookStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s.once.Do(s.Hook)
	return s.Store.TakeAll(ctx, rs, ds)
}
