// Package snapshot serves each HTTP request of sluice serve under one
// policy: the one in force when the request arrived (STYLE 22). Every step
// of the request (load shedding, planning, the answer) reads that
// snapshot, so that a reload in the middle of a request cannot serve one
// part of it under one policy and another part under the next.
package snapshot

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/policy"
)

// key is the context key of the policy a request is served under.
type key struct{}

// Serving loads the policy current returns once per request and serves
// the request under it. A request that already carries a policy (an outer
// Serving loaded it) keeps that one.
func Serving(current func() *policy.Policy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Of(r) != nil {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key{}, current())))
	})
}

// Of returns the policy r is served under: the one in force when r
// arrived. It is nil for a request that did not pass through Serving.
func Of(r *http.Request) *policy.Policy {
	p, _ := r.Context().Value(key{}).(*policy.Policy)
	return p
}
