package policy_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// TestQueueWithinFrontEndMaxDelay: a rule without refuse: delay is held to
// the front-end's bound, Options.MaxDelay (default 1s): nginx's rate=2r/s
// burst=3 needs 1.5s.
func TestQueueWithinFrontEndMaxDelay(t *testing.T) {
	const file = "testdata/invalid/queue-beyond-max-delay.yaml"
	for _, tc := range []struct {
		maxDelay time.Duration
		ok       bool
	}{{0, false}, {time.Second, false}, {1499 * time.Millisecond, false}, {1500 * time.Millisecond, true}, {time.Minute, true}} {
		_, err := policy.Load(file, policy.Options{MaxDelay: tc.maxDelay})
		if (err == nil) != tc.ok {
			t.Errorf("MaxDelay %s: loaded %v (%v), want %v", tc.maxDelay, err == nil, err, tc.ok)
		}
	}
	// The rule's own max_delay decides under refuse: delay, whatever the
	// front-end's.
	if _, err := policy.Load("testdata/invalid/queue-beyond-action-max-delay.yaml", policy.Options{MaxDelay: time.Minute}); err == nil {
		t.Error("a queue beyond the rule's action.max_delay loaded because the front-end's bound is longer")
	}
}
