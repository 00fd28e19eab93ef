package replay

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
)

// windowed reports that a limit's count is what suggest sets from peaks:
// a window algorithm, whose peaks are counted as it counts.
func windowed(l sluice.Limit) bool {
	d := algo.Of(l.Algorithm)
	return d != nil && d.Windowed
}

// runPolicy suggests the counts of the window limits of an existing
// policy from the peaks of their own keys, and returns the policy with
// those counts (its comments and layout kept), checked on the same log.
func (f *Suggest) runPolicy() (string, error) {
	data, err := os.ReadFile(f.PolicyFile)
	if err != nil {
		return "", &FileError{err}
	}
	p, err := policy.Parse(f.PolicyFile, data, policy.Options{})
	if err != nil {
		return "", &FileError{fmt.Errorf("--policy: %v", yamlload.Join(err, policy.Errors(err)))}
	}
	measured, err := Run(&f.Input, p)
	if err != nil {
		return "", &FileError{err}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice suggest: the window limits of %s for the traffic of %s\n", f.PolicyFile, f.Log)
	fmt.Fprintf(&b, "# (%s requests from %s to %s),\n", commas(measured.requests), logTime(measured.first), logTime(measured.last))
	fmt.Fprintf(&b, "# each set to the peak of its key at the %gth percentile: it refuses none of the\n", f.Percentile)
	fmt.Fprintf(&b, "# keys at or below it. A key's peak is the most it sent in any window of the limit.\n#\n")
	counts := f.suggestCounts(&b, measured)
	out, err := setCounts(data, counts)
	if err != nil {
		return "", &FileError{fmt.Errorf("--policy %s: %v", f.PolicyFile, err)}
	}
	final, err := policy.Parse(f.PolicyFile+" (suggested)", out, policy.Options{})
	if err != nil {
		return "", &FileError{fmt.Errorf("the suggested policy does not load (a defect of sluice suggest): %v", yamlload.Join(err, policy.Errors(err)))}
	}
	checked, err := Run(&f.Input, final)
	if err != nil {
		return "", &FileError{err}
	}
	writeRefusals(&b, checked)
	b.WriteString("# Shadow it first (action: {refuse: shadow}) and watch what it would refuse.\n")
	b.Write(out)
	return b.String(), nil
}

// suggestCounts returns the suggested count of each window limit that
// checked requests (by rule and limit name), and says why in comments.
func (f *Suggest) suggestCounts(b *strings.Builder, measured *Report) map[string]int64 {
	counts := map[string]int64{}
	for _, ls := range measured.limits {
		sz := sizeKeys(&ls.keys, f.CountFailed, f.KeepOutliers)
		name := ls.rule + "/" + ls.name
		if len(sz.peaks) == 0 || ls.limit.Period == 0 {
			fmt.Fprintf(b, "# %s: no request counted, or no window; left as written\n", name)
			sz.explainLeftOut(b, sluice.FormatDuration(ls.limit.Period))
			continue
		}
		peaks := sz.peaks
		what := fmt.Sprintf("# %s: peaks p50 %d, p90 %d, p99 %d, max %d in %s (%s keys counted)", name, quantile(peaks, 50), quantile(peaks, 90), quantile(peaks, 99), peaks[len(peaks)-1], sluice.FormatDuration(ls.limit.Period), commas(len(peaks)))
		if !windowed(ls.limit) {
			fmt.Fprintf(b, "%s; %s left as written\n", what, ls.limit.Algorithm)
			continue
		}
		n := max(1, quantile(peaks, f.Percentile))
		counts[ls.rule+"\x00"+ls.name] = n
		fmt.Fprintf(b, "%s; was %d, now %d", what, ls.limit.Count, n)
		if n > ls.limit.Count {
			fmt.Fprint(b, " (higher: the key at that percentile sent more than it allowed)")
		}
		fmt.Fprintln(b)
		warnings := sz.warnings(name, f.Percentile)
		f.Warnings = append(f.Warnings, warnings...)
		writeWarnings(b, warnings)
		sz.explainLeftOut(b, sluice.FormatDuration(ls.limit.Period))
	}
	return counts
}

// setCounts rewrites a policy's YAML with the counts of some limits (by
// rule and limit name): a limit's limit:, or the count of its rate:.
func setCounts(data []byte, counts map[string]int64) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("cannot read it again: %v", err)
	}
	rules := field(doc.Content[0], "rules")
	if rules == nil {
		return nil, fmt.Errorf("no rules")
	}
	for _, rule := range rules.Content {
		name, limits := field(rule, "name"), field(rule, "limits")
		if name == nil || limits == nil {
			continue
		}
		for _, lim := range limits.Content {
			ln := field(lim, "name")
			if ln == nil {
				continue
			}
			if n, ok := counts[name.Value+"\x00"+ln.Value]; ok {
				setCount(lim, n)
			}
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	enc.Close()
	return out.Bytes(), nil
}

// setCount sets a limit's count: limit: N, or the N of rate: N/PERIOD.
func setCount(lim *yaml.Node, n int64) {
	if v := field(lim, "limit"); v != nil {
		v.Value, v.Tag, v.Style = strconv.FormatInt(n, 10), "!!int", 0
		return
	}
	if v := field(lim, "rate"); v != nil {
		if _, period, ok := strings.Cut(v.Value, "/"); ok {
			v.Value = strconv.FormatInt(n, 10) + "/" + period
		}
	}
}

// field returns the value of key in a YAML mapping, nil if none.
func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
