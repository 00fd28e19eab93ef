package snapshot_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/snapshot"
)

// TestServingKeepsOuterSnapshot: a handler that loads its own snapshot
// (the decision API's) inside one that already loaded it (sluice serve's,
// around the load shedding) serves the request under the outer one, even
// when the policy was reloaded in between.
func TestServingKeepsOuterSnapshot(t *testing.T) {
	first, second := &policy.Policy{File: "first"}, &policy.Policy{File: "second"}
	var cur atomic.Pointer[policy.Policy]
	cur.Store(first)
	var inner *policy.Policy
	h := snapshot.Serving(cur.Load, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur.Store(second) // a reload between the two
		snapshot.Serving(cur.Load, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner = snapshot.Of(r)
		})).ServeHTTP(w, r)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if inner != first {
		t.Errorf("served under %q, want the policy in force when the request arrived (first)", name(inner))
	}
	if p := snapshot.Of(httptest.NewRequest("GET", "/", nil)); p != nil {
		t.Errorf("Of of a request that did not pass through Serving: %q, want nil", name(p))
	}
}

func name(p *policy.Policy) string {
	if p == nil {
		return "nil"
	}
	return p.File
}
