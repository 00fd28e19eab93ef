package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
)

// suggestFlags are sluice suggest's settings beyond the log's.
type suggestFlags struct {
	replayFlags
	key, window, algorithm, match, name, safeRate string
	policyFile                                    string
	percentile, headroom                          float64
	instances                                     int
	countFailed, keepOutliers                     bool
	warnings                                      []string // also printed to standard error
}

func suggest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice suggest", flag.ContinueOnError)
	var f suggestFlags
	f.define(fs)
	fs.StringVar(&f.key, "key", "ip", "what the suggested limit counts by, as a policy's key: ip, header:NAME, query:NAME, ...; several joined by commas")
	fs.StringVar(&f.window, "window", "1m", "the window of the suggested limit")
	fs.StringVar(&f.algorithm, "algorithm", "sliding_window", "the suggested limit's algorithm: sliding_window or fixed_window")
	fs.Float64Var(&f.percentile, "percentile", 99, "the limit is the peak of the key at this percentile: it refuses none of the keys at or below it, so at most 100-P% of keys")
	fs.StringVar(&f.match, "match", "/", "the path pattern of the suggested rule (net/http ServeMux syntax)")
	fs.StringVar(&f.name, "name", "suggested", "the name of the suggested rule")
	fs.StringVar(&f.safeRate, "safe-rate", "", "the rate one instance of the service was measured to serve safely (e.g. 500/s): adds a global limit of safe rate × --instances × --headroom")
	fs.IntVar(&f.instances, "instances", 1, "instances of the service behind sluice, for --safe-rate")
	fs.StringVar(&f.policyFile, "policy", "", "instead of a new rule, set the count of each window limit (fixed_window, sliding_window, sliding_log) of this policy from its own keys' peaks, keeping the rest of the file")
	fs.Float64Var(&f.headroom, "headroom", 0.8, "the share of the safe rate to allow, for --safe-rate (0.7 to 0.85 is usual)")
	fs.BoolVar(&f.countFailed, "count-failed", false, "size from the keys most of whose requests failed (the log's status 4xx or 5xx) too; by default they are left out as probable abuse")
	fs.BoolVar(&f.keepOutliers, "keep-outliers", false, "size from the keys whose peak is above the outlier fence too; by default they are left out as probable abuse")
	fs.Usage = func() { suggestUsage(fs) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	out, err := f.run()
	for _, w := range f.warnings {
		fmt.Fprintf(stderr, "sluice suggest: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice suggest: %v\n", err)
		var fe *fileError
		if errors.As(err, &fe) {
			return exitInvalid
		}
		return exitUsage
	}
	fmt.Fprint(stdout, out)
	return exitOK
}

func suggestUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: sluice suggest --log FILE [flags]

Proposes a policy from real traffic, printed as YAML with the reasoning in
comments. It replays the access log (as sluice replay does) to measure each
key's peak, the most requests it sent within --window, and suggests the
limit that refuses none of the keys at or below --percentile (so at most
100-P% of the keys counted); then it replays the log through the suggested
policy and says what it would have refused.

It leaves out, and lists as probable abuse, the keys most of whose requests
failed (the log's status 4xx or 5xx: a credential stuffer's 401s; unless
--count-failed) and the keys whose peak is above the outlier fence
max(Q3 + 3×IQR, 3×Q3) of the peaks (a scraper; unless --keep-outliers;
no fence under 8 keys). It warns when there are too few keys for the
percentile to be below the busiest one: P needs 100/(100-P) keys (100
for p99). With --safe-rate it adds a
global limit: the rate one instance serves safely × --instances ×
--headroom. Shadow the result first (action: {refuse: shadow}), watch what
it would refuse, then enforce it.

  sluice suggest --log access.log > policy.yaml
  sluice suggest --log access.log --key header:X-User --window 1s --percentile 99.9
  sluice suggest --log access.log --safe-rate 500/s --instances 4 --headroom 0.8
  sluice suggest --log access.log --policy policy.yaml > policy-suggested.yaml

Flags:
`)
	printFlags(fs.Output(), fs, nil)
}

// run measures, suggests, checks the suggestion on the same log, and
// returns the policy YAML.
func (f *suggestFlags) run() (string, error) {
	if err := f.check(); err != nil {
		return "", err
	}
	if f.log == "-" {
		return "", fmt.Errorf("--log -: suggest reads the log twice (to measure, then to check its suggestion); name a file")
	}
	if f.policyFile != "" {
		if f.safeRate != "" {
			return "", fmt.Errorf("--safe-rate adds a global limit to a new rule; with --policy, add it to the policy yourself (sluice suggest --safe-rate without --policy prints one)")
		}
		return f.runPolicy()
	}
	if f.percentile <= 0 || f.percentile > 100 || math.IsNaN(f.percentile) {
		return "", fmt.Errorf("--percentile %g: want more than 0, at most 100", f.percentile)
	}
	if f.algorithm != "sliding_window" && f.algorithm != "fixed_window" {
		return "", fmt.Errorf("--algorithm %q: want sliding_window or fixed_window (their peaks are exact to measure)", f.algorithm)
	}
	global, err := f.globalLimit()
	if err != nil {
		return "", err
	}
	probe, err := f.policy(measureHuge, "")
	if err != nil {
		return "", err
	}
	measured, err := replayLog(&f.replayFlags, probe)
	if err != nil {
		return "", &fileError{err}
	}
	if measured.limits[0].checked == 0 {
		return "", fmt.Errorf("--log %s: no request had a value for --key %s (%s readable requests)", f.log, f.key, commas(measured.requests))
	}
	sz := sizeKeys(&measured.limits[0].keys, f.countFailed, f.keepOutliers)
	if len(sz.peaks) == 0 {
		return "", fmt.Errorf("--log %s: every key was left out as probable abuse (%d of them); --count-failed or --keep-outliers to size from them", f.log, len(sz.failing)+len(sz.outliers)+sz.unnamed)
	}
	f.warnings = append(f.warnings, sz.warnings(f.limitName(), f.percentile)...)
	n := max(1, quantile(sz.peaks, f.percentile))
	final, err := f.policy(n, global)
	if err != nil {
		return "", err
	}
	checked, err := replayLog(&f.replayFlags, final)
	if err != nil {
		return "", &fileError{err}
	}
	var b strings.Builder
	f.explain(&b, measured, &sz, n, global, checked)
	b.WriteString(f.yaml(n, global))
	return b.String(), nil
}

// fileError is an error reading the log (exit 1), not of the command
// line (exit 2).
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// globalLimit is the rate --safe-rate, --instances and --headroom make
// ("" without --safe-rate).
func (f *suggestFlags) globalLimit() (string, error) {
	if f.safeRate == "" {
		return "", nil
	}
	r, err := policy.ParseRate(f.safeRate)
	if err != nil {
		return "", fmt.Errorf("--safe-rate: %v", err)
	}
	if f.instances < 1 || f.headroom <= 0 || f.headroom > 1 || math.IsNaN(f.headroom) {
		return "", fmt.Errorf("--instances %d, --headroom %g: want at least 1 instance and a headroom above 0, at most 1", f.instances, f.headroom)
	}
	n := math.Floor(float64(r.Count) * float64(f.instances) * f.headroom)
	if n < 1 || n > 1<<36 {
		return "", fmt.Errorf("--safe-rate %s × %d × %g = %g per %s: want 1 to 2^36", f.safeRate, f.instances, f.headroom, n, sluice.FormatDuration(r.Period))
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
func (f *suggestFlags) limitName() string {
	return "per-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, f.key)
}

// yaml writes the suggested policy: a per-key limit of n per --window,
// and a global limit of rate global when it is set.
func (f *suggestFlags) yaml(n int64, global string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules:\n  - name: %s\n    match:\n      path: %q\n    limits:\n", f.name, f.match)
	keys := strings.Split(f.key, ",")
	for i := range keys {
		keys[i] = fmt.Sprintf("%q", strings.TrimSpace(keys[i]))
	}
	window := "window"
	fmt.Fprintf(&b, "      - name: %s\n        key: [%s]\n        algorithm: %s\n        limit: %d\n        %s: %s\n",
		f.limitName(), strings.Join(keys, ", "), f.algorithm, n, window, f.window)
	if global != "" {
		r, _ := policy.ParseRate(global)
		fmt.Fprintf(&b, "      - name: global\n        key: global\n        algorithm: gcra\n        rate: %s\n        burst: %d\n", global, r.Count)
	}
	return b.String()
}

// policy compiles the suggested policy with a per-key limit of n.
func (f *suggestFlags) policy(n int64, global string) (*policy.Policy, error) {
	p, err := policy.Parse("suggested policy", []byte(f.yaml(n, global)), policy.Options{})
	if err != nil {
		return nil, fmt.Errorf("--key, --window, --match or --name: %v", yamlload.Each(err, policy.Errors(err)))
	}
	return p, nil
}

// explain writes the reasoning as YAML comments: what was measured, why
// the limits are what they are, and what they refuse on the same log.
func (f *suggestFlags) explain(b *strings.Builder, measured *replayReport, sz *sizing, n int64, global string, checked *replayReport) {
	peaks := sz.peaks
	fmt.Fprintf(b, "# sluice suggest: limits for the traffic of %s\n", f.log)
	fmt.Fprintf(b, "# (%s requests from %s to %s; %s keys of %s).\n", commas(measured.requests), logTime(measured.first), logTime(measured.last), commas(sz.countKeys), f.key)
	if measured.bad.Total > 0 {
		fmt.Fprintf(b, "# %s line(s) of the log could not be read and were left out (sluice replay lists them).\n", commas(measured.bad.Total))
	}
	writeWarnings(b, f.warnings)
	fmt.Fprintf(b, "#\n# %s: each key's peak is the most requests it sent in any %s, as %s\n", f.limitName(), f.window, f.algorithm)
	fmt.Fprintf(b, "# counts them: p50 %d, p90 %d, p99 %d, max %d (%s keys counted). A limit of %d refuses none of\n", quantile(peaks, 50), quantile(peaks, 90), quantile(peaks, 99), peaks[len(peaks)-1], commas(len(peaks)), n)
	fmt.Fprintf(b, "# the keys at or below the %gth percentile (it is the peak of the key there).\n", f.percentile)
	sz.explainLeftOut(b, f.window)
	if global != "" {
		fmt.Fprintf(b, "#\n# global: the measured safe rate %s × %d instances × headroom %g = %s,\n", f.safeRate, f.instances, f.headroom, global)
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
func writeRefusals(b *strings.Builder, checked *replayReport) {
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
