// Command grpc shows sluice's gRPC interceptors on a server with the
// standard health service: one call per second per peer address.
//
//	go run ./grpc
package main

import (
	"log"
	"net"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "per-peer", Key: grpclimit.ByPeer, Limit: sluice.GCRA(sluice.PerSecond(1), 1)},
		{Name: "per-method", Key: grpclimit.ByMethod, Limit: sluice.SlidingWindow(100, time.Minute)},
	}})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:8084")
	if err != nil {
		log.Fatal(err)
	}
	log.Println("gRPC health service with rate limits on 127.0.0.1:8084")
	log.Fatal(srv.Serve(lis))
}
