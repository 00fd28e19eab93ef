package replay

import (
	"fmt"
	"math"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
)

// Suggest is what sluice suggest sizes and how: its flags beyond the
// log's. Run replays the log to measure, sizes, and checks its suggestion
// on the same log.
type Suggest struct {
	Input
	Key, Window, Algorithm, Match, Name, SafeRate string
	PolicyFile                                    string
	Percentile, Headroom                          float64
	Instances                                     int
	CountFailed, KeepOutliers                     bool
	Warnings                                      []string // set by Run; also printed to standard error
}

// run measures, suggests, checks the suggestion on the same log, and
// returns the policy YAML.
func (f *Suggest) Run() (string, error) {
	if err := f.Check(); err != nil {
		return "", err
	}
	if f.Log == "-" {
		return "", fmt.Errorf("--log -: suggest reads the log twice (to measure, then to check its suggestion); name a file")
	}
	if f.PolicyFile != "" {
		if f.SafeRate != "" {
			return "", fmt.Errorf("--safe-rate adds a global limit to a new rule; with --policy, add it to the policy yourself (sluice suggest --safe-rate without --policy prints one)")
		}
		return f.runPolicy()
	}
	if f.Percentile <= 0 || f.Percentile > 100 || math.IsNaN(f.Percentile) {
		return "", fmt.Errorf("--percentile %g: want more than 0, at most 100", f.Percentile)
	}
	if f.Algorithm != "sliding_window" && f.Algorithm != "fixed_window" {
		return "", fmt.Errorf("--algorithm %q: want sliding_window or fixed_window (their peaks are exact to measure)", f.Algorithm)
	}
	global, err := f.globalLimit()
	if err != nil {
		return "", err
	}
	probe, err := f.policy(measureHuge, "")
	if err != nil {
		return "", err
	}
	measured, err := Run(&f.Input, probe)
	if err != nil {
		return "", &FileError{err}
	}
	if measured.limits[0].checked == 0 {
		return "", fmt.Errorf("--log %s: no request had a value for --key %s (%s readable requests)", f.Log, f.Key, commas(measured.requests))
	}
	sz := sizeKeys(&measured.limits[0].keys, f.CountFailed, f.KeepOutliers)
	if len(sz.peaks) == 0 {
		return "", fmt.Errorf("--log %s: every key was left out as probable abuse (%d of them); --count-failed or --keep-outliers to size from them", f.Log, len(sz.failing)+len(sz.outliers)+sz.unnamed)
	}
	f.Warnings = append(f.Warnings, sz.warnings(f.limitName(), f.Percentile)...)
	n := max(1, quantile(sz.peaks, f.Percentile))
	final, err := f.policy(n, global)
	if err != nil {
		return "", err
	}
	checked, err := Run(&f.Input, final)
	if err != nil {
		return "", &FileError{err}
	}
	var b strings.Builder
	f.explain(&b, measured, &sz, n, global, checked)
	b.WriteString(f.yaml(n, global))
	return b.String(), nil
}

// FileError is an error reading the log (exit 1), not of the command
// line (exit 2).
type FileError struct{ err error }

func (e *FileError) Error() string { return e.err.Error() }
func (e *FileError) Unwrap() error { return e.err }

// globalLimit is the rate --safe-rate, --instances and --headroom make
// ("" without --safe-rate).
func (f *Suggest) globalLimit() (string, error) {
	if f.SafeRate == "" {
		return "", nil
	}
	r, err := policy.ParseRate(f.SafeRate)
	if err != nil {
		return "", fmt.Errorf("--safe-rate: %v", err)
	}
	if f.Instances < 1 || f.Headroom <= 0 || f.Headroom > 1 || math.IsNaN(f.Headroom) {
		return "", fmt.Errorf("--instances %d, --headroom %g: want at least 1 instance and a headroom above 0, at most 1", f.Instances, f.Headroom)
	}
	n := math.Floor(float64(r.Count) * float64(f.Instances) * f.Headroom)
	if n < 1 || n > 1<<36 {
		return "", fmt.Errorf("--safe-rate %s × %d × %g = %g per %s: want 1 to 2^36", f.SafeRate, f.Instances, f.Headroom, n, sluice.FormatDuration(r.Period))
	}
	return fmt.Sprintf("%d/%s", int64(n), rateUnit(r)), nil
}

// rateUnit writes a rate's period as a policy rate's unit.
func rateUnit(r sluice.Rate) string {
	s := sluice.FormatDuration(r.Period)
	if strings.HasPrefix(s, "1") && len(s) > 1 && (s[1] < '0' || s[1] > '9') {
		return s[1:] // "1s" -> "s"
	}
	return s
}

// limitName is the suggested per-key limit's name: "per-" and the key.
func (f *Suggest) limitName() string {
	return "per-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, f.Key)
}

// yaml writes the suggested policy: a per-key limit of n per --window,
// and a global limit of rate global when it is set.
func (f *Suggest) yaml(n int64, global string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules:\n  - name: %s\n    match:\n      path: %q\n    limits:\n", f.Name, f.Match)
	keys := strings.Split(f.Key, ",")
	for i := range keys {
		keys[i] = fmt.Sprintf("%q", strings.TrimSpace(keys[i]))
	}
	window := "window"
	fmt.Fprintf(&b, "      - name: %s\n        key: [%s]\n        algorithm: %s\n        limit: %d\n        %s: %s\n",
		f.limitName(), strings.Join(keys, ", "), f.Algorithm, n, window, f.Window)
	if global != "" {
		r, _ := policy.ParseRate(global)
		fmt.Fprintf(&b, "      - name: global\n        key: global\n        algorithm: gcra\n        rate: %s\n        burst: %d\n", global, r.Count)
	}
	return b.String()
}

// policy compiles the suggested policy with a per-key limit of n.
func (f *Suggest) policy(n int64, global string) (*policy.Policy, error) {
	p, err := policy.Parse("suggested policy", []byte(f.yaml(n, global)), policy.Options{})
	if err != nil {
		return nil, fmt.Errorf("--key, --window, --match or --name: %v", yamlload.Join(err, policy.Errors(err)))
	}
	return p, nil
}

// explain writes the reasoning as YAML comments: what was measured, why
// the limits are what they are, and what they refuse on the same log.
func (f *Suggest) explain(b *strings.Builder, measured *Report, sz *sizing, n int64, global string, checked *Report) {
	peaks := sz.peaks
	fmt.Fprintf(b, "# sluice suggest: limits for the traffic of %s\n", f.Log)
	fmt.Fprintf(b, "# (%s requests from %s to %s; %s keys of %s).\n", commas(measured.requests), logTime(measured.first), logTime(measured.last), commas(sz.countKeys), f.Key)
	if measured.bad.Total > 0 {
		fmt.Fprintf(b, "# %s line(s) of the log could not be read and were left out (sluice replay lists them).\n", commas(measured.bad.Total))
	}
	writeWarnings(b, f.Warnings)
	fmt.Fprintf(b, "#\n# %s: each key's peak is the most requests it sent in any %s, as %s\n", f.limitName(), f.Window, f.Algorithm)
	fmt.Fprintf(b, "# counts them: p50 %d, p90 %d, p99 %d, max %d (%s keys counted). A limit of %d refuses none of\n", quantile(peaks, 50), quantile(peaks, 90), quantile(peaks, 99), peaks[len(peaks)-1], commas(len(peaks)), n)
	fmt.Fprintf(b, "# the keys at or below the %gth percentile (it is the peak of the key there).\n", f.Percentile)
	sz.explainLeftOut(b, f.Window)
	if global != "" {
		fmt.Fprintf(b, "#\n# global: the measured safe rate %s × %d instances × headroom %g = %s,\n", f.SafeRate, f.Instances, f.Headroom, global)
		fmt.Fprintf(b, "# with a burst of one period's worth: lower it if the service cannot take that at once.\n")
	}
	writeRefusals(b, checked)
	fmt.Fprintf(b, "# Shadow it first (action: {refuse: shadow}) and watch what it would refuse.\n")
}

// writeWarnings writes warnings as YAML comments.
func writeWarnings(b *strings.Builder, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(b, "# WARNING: %s.\n", w)
	}
}

// writeRefusals writes, as YAML comments, what a suggested policy
// refused when the log was replayed through it.
func writeRefusals(b *strings.Builder, checked *Report) {
	fmt.Fprintf(b, "#\n# Replayed on the same log, this policy refuses:\n")
	for _, ls := range checked.limits {
		refusedKeys := 0
		var top []string
		for _, k := range ls.keys.sortedKeys(func(a, b *keyStats) int { return b.refused - a.refused }) {
			if ks := ls.keys.m[k]; ks.refused > 0 {
				refusedKeys++
				if len(top) < 3 {
					top = append(top, fmt.Sprintf("%s (%s)", showKey(k), commas(ks.refused)))
				}
			}
		}
		fmt.Fprintf(b, "#   %s: %s of %s requests (%s), from %s of %s keys", ls.name, commas(ls.refused), commas(ls.checked), percent(ls.refused, ls.checked), commas(refusedKeys), ls.keys.countText())
		if len(top) > 0 {
			fmt.Fprintf(b, ": %s", strings.Join(top, ", "))
		}
		fmt.Fprintln(b)
	}
}
