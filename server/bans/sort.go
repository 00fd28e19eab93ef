package bans

import (
	"slices"
	"strings"
)

// sortEntries sorts es by when they end, then by key.
func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}
