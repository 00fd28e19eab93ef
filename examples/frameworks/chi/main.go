// Command chi shows sluice's net/http middleware on a chi router, as a
// service would use it: a limit per client IP on every route, and on the
// route that places orders a limit per user, keyed by the user an
// authentication middleware put in the request's context. The middleware
// has chi's own shape, func(http.Handler) http.Handler, so r.Use and
// r.With take it as it is, and the two stack: a response lists both
// limits, and an order the per-user limit refuses is not charged to the
// client's IP.
//
//	go run ./chi
//	curl -i localhost:8081/hello
//	curl -i -X POST -H 'Authorization: Bearer token-ann' localhost:8081/orders
package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	r, err := router(sluice.New(store))
	if err != nil {
		log.Fatal(err)
	}
	log.Println("listening on 127.0.0.1:8081")
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", r))
}

// router returns the service's routes behind their limits.
func router(limiter *sluice.Limiter) (http.Handler, error) {
	perIP, err := httplimit.New(limiter, httplimit.Config{Limits: []httplimit.Limit{{
		Name:  "per-ip",
		Key:   httplimit.ByIP(&httplimit.ClientIP{}), // the TCP peer; see ClientIP for proxies
		Limit: sluice.TokenBucket(sluice.PerSecond(10), 20),
	}}})
	if err != nil {
		return nil, err
	}
	perUser, err := httplimit.New(limiter, httplimit.Config{Limits: []httplimit.Limit{{
		Name:  "per-user",
		Key:   userKey,
		Limit: sluice.SlidingWindow(5, time.Minute),
	}}})
	if err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(perIP)
	r.Get("/hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	r.With(authenticate, perUser).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "order placed for "+user(r.Context())+"\n")
	})
	return r, nil
}

// userKey keys a request by its authenticated user: what the handler acts
// for, never a header the client could send twice or spell two ways.
func userKey(r *http.Request) (string, error) { return user(r.Context()), nil }

type userCtxKey struct{}

func user(ctx context.Context) string {
	u, _ := ctx.Value(userCtxKey{}).(string)
	return u
}

// tokens stands for the service's session store.
var tokens = map[string]string{"token-ann": "ann", "token-bob": "bob"}

// authenticate puts the user of the request's bearer token in its context,
// and refuses a request without a valid one.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userCtxKey{}, u)))
	})
}
