package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// sizing is what suggest sizes one limit from: the peaks of the keys it
// counts, and the keys it leaves out as probable abuse, with why.
//
// Two kinds of key are left out. A key most of whose requests failed (the
// log's status 4xx or 5xx: a credential stuffer's 401s, a scanner's 404s)
// is not traffic the service serves, unless --count-failed. A key whose
// peak is above the outlier fence, max(Q3 + 3×IQR, 3×Q3) of all the peaks,
// is not a client like the others, unless --keep-outliers: Q3 + 3×IQR is
// Tukey's far-out fence, which a few extreme keys cannot move (quartiles,
// not the mean or the maximum), and 3×Q3 keeps it from closing in when
// most keys peak alike (IQR 0). Fewer than minFenceKeys keys have no fence.
type sizing struct {
	peaks     []int64   // of the keys counted, sorted
	fence     int64     // peaks above it are outliers; 0: no fence
	q1, q3    int64     // the quartiles the fence is made of
	outliers  []keyPeak // left out: peak above the fence, highest first
	failing   []keyPeak // left out: most of their requests failed, most first
	unnamed   int       // outliers among the keys the table forgot
	countKeys int       // keys seen
}

// keyPeak is one key's peak and requests under a limit.
type keyPeak struct {
	key              string
	peak             int64
	requests, failed int
}

// minFenceKeys is the fewest keys whose quartiles make an outlier fence.
const minFenceKeys = 8

// sizeKeys sorts a limit's keys into those suggest sizes from and those
// it leaves out.
func sizeKeys(kt *keyTable, countFailed, keepOutliers bool) sizing {
	var s sizing
	var named []keyPeak
	for k, ks := range kt.m {
		kp := keyPeak{key: k, peak: ks.peak, requests: ks.requests, failed: ks.failed}
		if !countFailed && 2*ks.failed > ks.requests {
			s.failing = append(s.failing, kp)
			continue
		}
		named = append(named, kp)
	}
	var forgotten []int64
	for p, n := range kt.peaks {
		for range n {
			forgotten = append(forgotten, p)
		}
	}
	s.countKeys = len(kt.m) + kt.forgotten
	all := append(forgotten, peaksOf(named)...)
	slices.Sort(all)
	if !keepOutliers {
		s.fence, s.q1, s.q3 = outlierFence(all)
	}
	if s.fence == 0 {
		s.peaks = all
	} else {
		s.peaks = all[:0:0]
		for _, p := range all {
			if p <= s.fence {
				s.peaks = append(s.peaks, p)
			}
		}
		for _, kp := range named {
			if kp.peak > s.fence {
				s.outliers = append(s.outliers, kp)
			}
		}
		s.unnamed = len(all) - len(s.peaks) - len(s.outliers)
	}
	slices.SortFunc(s.outliers, func(a, b keyPeak) int { return cmpKeyPeak(int(b.peak), int(a.peak), a, b) })
	slices.SortFunc(s.failing, func(a, b keyPeak) int { return cmpKeyPeak(b.failed, a.failed, a, b) })
	return s
}

func cmpKeyPeak(x, y int, a, b keyPeak) int {
	if x != y {
		return x - y
	}
	return strings.Compare(a.key, b.key)
}

func peaksOf(kps []keyPeak) []int64 {
	out := make([]int64, len(kps))
	for i, kp := range kps {
		out[i] = kp.peak
	}
	return out
}

// outlierFence returns max(Q3 + 3×IQR, 3×Q3) of sorted peaks and its
// quartiles, or 0 when there are fewer than minFenceKeys.
func outlierFence(sorted []int64) (fence, q1, q3 int64) {
	if len(sorted) < minFenceKeys {
		return 0, 0, 0
	}
	q1, q3 = quantile(sorted, 25), quantile(sorted, 75)
	return max(q3+3*(q3-q1), 3*q3), q1, q3
}

// keysForPercentile is the fewest keys whose P-th percentile has a key
// above it: with fewer, the percentile is the busiest key's peak.
func keysForPercentile(p float64) int {
	if p >= 100 {
		return 0 // the maximum, asked for
	}
	return int(math.Ceil(100/(100-p) - 1e-9))
}

// warnings are what a reader of the suggestion must know: too few keys
// for the percentile to mean anything, keys left out.
func (s *sizing) warnings(name string, percentile float64) []string {
	var out []string
	if need := keysForPercentile(percentile); len(s.peaks) < need {
		out = append(out, fmt.Sprintf("%s: %d keys counted: the %gth percentile of fewer than %d keys is the busiest one's peak (a key above the Pth percentile needs at least 100/(100-P) keys); use a longer log or a lower --percentile",
			name, len(s.peaks), percentile, need))
	}
	if n := len(s.outliers) + s.unnamed + len(s.failing); n > 0 {
		out = append(out, fmt.Sprintf("%s: %d key(s) left out as probable abuse (listed in the output)", name, n))
	}
	return out
}

// explainLeftOut writes, as YAML comments, the keys left out and why.
func (s *sizing) explainLeftOut(b *strings.Builder, window string) {
	if len(s.outliers)+s.unnamed+len(s.failing) == 0 {
		return
	}
	fmt.Fprintf(b, "#   left out as probable abuse (the limit refuses them):\n")
	const most = 10
	for i, kp := range s.outliers {
		if i == most {
			fmt.Fprintf(b, "#     ... and %d more above the fence\n", len(s.outliers)-most)
			break
		}
		fmt.Fprintf(b, "#     %s: peak %d in %s, above the outlier fence %d (max(Q3 %d + 3×IQR %d, 3×Q3); --keep-outliers counts it)\n",
			showKey(kp.key), kp.peak, window, s.fence, s.q3, s.q3-s.q1)
	}
	if s.unnamed > 0 {
		fmt.Fprintf(b, "#     %d forgotten key(s) (--max-keys) above the outlier fence %d\n", s.unnamed, s.fence)
	}
	for i, kp := range s.failing {
		if i == most {
			fmt.Fprintf(b, "#     ... and %d more whose requests mostly failed\n", len(s.failing)-most)
			break
		}
		fmt.Fprintf(b, "#     %s: %s of its %s requests failed (4xx/5xx), peak %d in %s (--count-failed counts it)\n",
			showKey(kp.key), commas(kp.failed), commas(kp.requests), kp.peak, window)
	}
}
