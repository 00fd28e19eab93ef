package sluice

import "context"

// The entry of a call is where it came into the service: the route, the
// handler or the gRPC method whose middleware marked it (Sentinel's context
// entrance). A limit can count calls to a shared resource only when they
// came through a given entry (CHAIN): a policy limit's when: {entry: NAME},
// httplimit.Limit.Entry, grpclimit.Limit.Entry. In sluice serve the entry
// is the name of the rule that matched first, or a header from a trusted
// proxy (the policy's entry_header).

// entryKey is the context key of a call's entry.
type entryKey struct{}

// WithEntry returns ctx marked as having come through the entry name.
// It replaces an entry ctx already has; a middleware that marks the
// entries of its calls (httplimit.Config.Entry, grpclimit.Config.Entry)
// keeps the one a middleware further out set, so that a call's entry is
// the first it came through. An empty name removes the mark.
func WithEntry(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, entryKey{}, name)
}

// EntryFrom returns the entry ctx is marked with (WithEntry), "" when it
// has none.
func EntryFrom(ctx context.Context) string {
	name, _ := ctx.Value(entryKey{}).(string)
	return name
}
