// Package sched measures how late this machine runs a goroutine, for tests
// whose bounds on elapsed time must hold on a loaded machine: a bound
// written as "the deadline plus what the scheduler added, measured in the
// same run" fails only when the code is slow, not when the machine is.
package sched

import (
	"slices"
	"time"
)

// Lateness measures, until the returned function is called, how late a
// 10 ms sleep wakes, and returns the most it was late.
func Lateness() func() time.Duration {
	done := make(chan struct{})
	res := make(chan time.Duration)
	go func() {
		var ls []time.Duration
		for {
			select {
			case <-done:
				res <- slices.Max(ls)
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(10 * time.Millisecond)
			ls = append(ls, time.Since(t0)-10*time.Millisecond)
		}
	}()
	return func() time.Duration { close(done); return <-res }
}
