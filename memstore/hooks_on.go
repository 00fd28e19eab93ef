//go:build sluicehooks

package memstore

import "runtime"

// testHooks: see hooks_off.go.
const testHooks = true

// stepHook, when set, runs at each step instead of a yield: a test that
// schedules the steps of several goroutines itself.
var stepHook func()

func hookStep() {
	if stepHook != nil {
		stepHook()
		return
	}
	runtime.Gosched()
}
