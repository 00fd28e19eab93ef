package redisstore

import "testing"

// TestClaimConflict: a check whose second lease already has a call in
// flight claims none of its leases and waits for that call; those it had
// claimed are free again and whoever waited on its claim is woken.
func TestClaimConflict(t *testing.T) {
	l := &leaser{}
	ls := []*lease{{}, {}, {}}
	other := make(chan struct{})
	ls[1].refill = other
	if wait := l.claim(ls, []int{0, 1, 2}); wait != other {
		t.Fatalf("claim returned %v, want the call in flight %v", wait, other)
	}
	if ls[0].refill != nil || ls[2].refill != nil || ls[1].refill != other {
		t.Errorf("refills after the conflict: %v %v %v", ls[0].refill, ls[1].refill, ls[2].refill)
	}
}
