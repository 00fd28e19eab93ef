package shedding

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// TestSheddingReload: a policy whose shed: section is unchanged keeps its
// Limiter (and what it learned); a changed section makes a new one; no
// section lets requests through untouched.
func TestSheddingReload(t *testing.T) {
	next := http.NotFoundHandler()
	sh := &shedding{name: "gateway", next: next}
	a := &policy.Shed{PriorityHeader: "Sluice-Priority"}
	sh.handler(a)
	first := sh.cur.Load()
	same := *a // another policy load, the same section
	sh.handler(&same)
	if sh.cur.Load() != first {
		t.Fatal("an unchanged section made a new Limiter")
	}
	b := &policy.Shed{PriorityHeader: "Sluice-Priority", Algorithm: "gradient2"}
	sh.handler(b)
	if cur := sh.cur.Load(); cur == first || cur.lim.Stats().Algorithm != "gradient2" {
		t.Fatal("a changed section kept the old Limiter")
	}
	if h := sh.handler(nil); h == nil {
		t.Fatal("no handler without a section")
	}
}
