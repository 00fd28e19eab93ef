package sluice_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// FuzzParseAlgorithm: no name panics; a name is accepted only when it is an
// algorithm's String form, and a refusal wraps ErrInvalidLimit.
func FuzzParseAlgorithm(f *testing.F) {
	for _, s := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "leaky_bucket", "warm_up", "concurrency", "", "algorithm(0)", "GCRA", " gcra", "gcra\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		a, err := sluice.ParseAlgorithm(name)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("%q: error %v does not wrap ErrInvalidLimit", name, err)
			}
			return
		}
		if a.String() != name {
			t.Fatalf("%q parsed as %v", name, a)
		}
	})
}
