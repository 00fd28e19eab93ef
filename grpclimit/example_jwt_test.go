package grpclimit_test

import (
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/jwtclaims"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
)

// A limit per user, keyed by the sub claim of the bearer token in each
// call's authorization metadata, verified against the identity
// provider's key set.
func ExampleByClaim() {
	v, err := jwtclaims.New(jwtclaims.Config{
		JWKSURL:  "https://idp.example/.well-known/jwks.json",
		Issuer:   "https://idp.example",
		Audience: "orders-api",
	})
	if err != nil {
		log.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{
		JWT: v,
		Limits: []grpclimit.Limit{
			{Name: "per-user", Key: grpclimit.ByClaim("sub"), Limit: sluice.FixedWindow(100, time.Minute)},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
}
