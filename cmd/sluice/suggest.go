package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	rp "github.com/sluicehq/sluice/internal/replay"
)

func suggest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice suggest", flag.ContinueOnError)
	var f rp.Suggest
	defineInput(fs, &f.Input)
	fs.StringVar(&f.Key, "key", "ip", "what the suggested limit counts by, as a policy's key: ip, header:NAME, query:NAME, ...; several joined by commas")
	fs.StringVar(&f.Window, "window", "1m", "the window of the suggested limit")
	fs.StringVar(&f.Algorithm, "algorithm", "sliding_window", "the suggested limit's algorithm: sliding_window or fixed_window")
	fs.Float64Var(&f.Percentile, "percentile", 99, "the limit is the peak of the key at this percentile: it refuses none of the keys at or below it, so at most 100-P% of keys")
	fs.StringVar(&f.Match, "match", "/", "the path pattern of the suggested rule (net/http ServeMux syntax)")
	fs.StringVar(&f.Name, "name", "suggested", "the name of the suggested rule")
	fs.StringVar(&f.SafeRate, "safe-rate", "", "the rate one instance of the service was measured to serve safely (e.g. 500/s): adds a global limit of safe rate × --instances × --headroom")
	fs.IntVar(&f.Instances, "instances", 1, "instances of the service behind sluice, for --safe-rate")
	fs.StringVar(&f.PolicyFile, "policy", "", "instead of a new rule, set the count of each window limit (fixed_window, sliding_window, sliding_log) of this policy from its own keys' peaks, keeping the rest of the file")
	fs.Float64Var(&f.Headroom, "headroom", 0.8, "the share of the safe rate to allow, for --safe-rate (0.7 to 0.85 is usual)")
	fs.BoolVar(&f.CountFailed, "count-failed", false, "size from the keys most of whose requests failed (the log's status 4xx or 5xx) too; by default they are left out as probable abuse")
	fs.BoolVar(&f.KeepOutliers, "keep-outliers", false, "size from the keys whose peak is above the outlier fence too; by default they are left out as probable abuse")
	fs.Usage = func() { suggestUsage(fs) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	out, err := f.Run()
	for _, w := range f.Warnings {
		fmt.Fprintf(stderr, "sluice suggest: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice suggest: %v\n", err)
		var fe *rp.FileError
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
