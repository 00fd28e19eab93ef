package bench

import "testing"

// TestKeysDistinct checks that the many-key cases really use many keys: the
// key set has manyKeys distinct entries, and the index sequences the
// benchmark loops draw (one per goroutine) spread over all of them and
// differ from one goroutine to the next.
func TestKeysDistinct(t *testing.T) {
	seen := make(map[string]bool, len(keys100k))
	for _, k := range keys100k {
		seen[k] = true
	}
	if len(keys100k) != manyKeys || len(seen) != manyKeys {
		t.Fatalf("%d keys, %d distinct; want %d distinct", len(keys100k), len(seen), manyKeys)
	}
	if len(oneKey) != 1 {
		t.Fatalf("oneKey has %d keys", len(oneKey))
	}

	// Uniform draws: n draws hit n(1-1/e) ≈ 63,212 distinct keys, 10n
	// draws all but n/e^10 ≈ 5.
	const n = manyKeys
	firsts := make(map[int]bool)
	for seed := range uint64(8) {
		pick := newPicker(n, seed)
		hit := make([]bool, n)
		distinct := 0
		for i := range 10 * n {
			k := pick.next()
			if k < 0 || k >= n {
				t.Fatalf("seed %d: index %d out of [0, %d)", seed, k, n)
			}
			if !hit[k] {
				hit[k] = true
				distinct++
			}
			if i == 0 {
				firsts[k] = true
			}
			if i == n-1 && (distinct < 62_000 || distinct > 64_500) {
				t.Errorf("seed %d: %d draws hit %d distinct keys, want about 63,212", seed, n, distinct)
			}
		}
		if distinct < n-100 {
			t.Errorf("seed %d: %d draws hit %d distinct keys, want nearly all %d", seed, 10*n, distinct, n)
		}
		t.Logf("seed %d: %d distinct keys after %d draws", seed, distinct, 10*n)
	}
	if len(firsts) < 8 {
		t.Errorf("8 seeds start at only %d distinct keys", len(firsts))
	}

	if k := newPicker(1, 3).next(); k != 0 {
		t.Errorf("a one-key picker returned %d", k)
	}
}
