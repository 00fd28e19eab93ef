//go:build !sluicehooks

package memstore

// testHooks turns on the calls that let a test interleave goroutines at
// the steps of the protocols read without locks (build tag sluicehooks;
// scripts/test runs those tests with it). Off, the calls compile away.
const testHooks = false

func hookStep() {}
