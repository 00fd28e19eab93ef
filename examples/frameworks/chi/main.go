// Command chi shows sluice's net/http middleware on a chi router: the
// middleware has chi's own shape, so r.Use takes it as it is.
//
//	go run ./chi    # then: curl -i localhost:8081/hello (twice per second allowed)
package main

import (
	"log"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/examples/frameworks/internal/demo"
)

func main() {
	limit, closeStore := demo.Middleware()
	defer closeStore()

	r := chi.NewRouter()
	r.Use(limit)
	r.Get("/hello", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	log.Println("listening on 127.0.0.1:8081;", sluice.TokenBucket(sluice.PerSecond(2), 2), "per client IP")
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", r))
}
