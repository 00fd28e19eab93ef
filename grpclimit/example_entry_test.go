package grpclimit_test

import (
	"log"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
)

// A database limit that counts only the calls of the checkout service
// (Sentinel's CHAIN): the interceptors in front of checkout mark its calls
// with their entry, and the limit further in reads it. Calls that no
// interceptor marked "checkout" are not limited by it.
func ExampleConfig_entry() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	limiter := sluice.New(store)
	checkout, err := grpclimit.New(limiter, grpclimit.Config{
		Entry:  "checkout",
		Limits: []grpclimit.Limit{{Name: "checkout-peer", Key: grpclimit.ByPeer, Limit: sluice.GCRA(sluice.PerSecond(50), 50)}},
	})
	if err != nil {
		log.Fatal(err)
	}
	database, err := grpclimit.New(limiter, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "db-from-checkout", Key: grpclimit.Global, Limit: sluice.GCRA(sluice.PerSecond(500), 500), Entry: "checkout"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(checkout.Unary(), database.Unary()),
		grpc.ChainStreamInterceptor(checkout.Stream(), database.Stream()))
}
