// Package demo builds the limiter the framework examples share: two
// requests per second per client IP, in process.
package demo

import (
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Middleware returns the net/http middleware and a function that closes its
// store.
func Middleware() (func(http.Handler) http.Handler, func()) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
		{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.TokenBucket(sluice.PerSecond(2), 2)},
	}})
	if err != nil {
		panic(err)
	}
	return mw, func() { store.Close() }
}
