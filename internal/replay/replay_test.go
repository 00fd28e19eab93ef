package replay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/accesslog"
	"github.com/sluicehq/sluice/policy"
)

var day = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// samplePolicy limits logins per client to 30 a minute and the API per
// client to 100 a minute.
const samplePolicy = `rules:
  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: login-per-ip, key: ip, algorithm: fixed_window, limit: 30, window: 1m}
  - name: api
    match: {path: /api/}
    limits:
      - {name: api-per-ip, key: ip, algorithm: fixed_window, limit: 100, window: 1m}
`

// replayString replays log through the policy pol, keeping maxKeys keys.
func replayString(t *testing.T, log, pol string, maxKeys int) *Report {
	t.Helper()
	p, err := policy.Parse("policy.yaml", []byte(pol), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(&Input{Log: path, Format: "auto", Fields: accesslog.DefaultFields, MaxKeys: maxKeys}, p)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestReplayBoundedMemory: a log of more distinct clients than --max-keys
// is replayed with at most max-keys/4 keys held per limit (the rest
// forgotten, and said so), and the refused key is never the one
// forgotten; a line longer than 64 KiB is counted, not held.
func TestReplayBoundedMemory(t *testing.T) {
	var b strings.Builder
	at := day
	for i := range 5000 {
		at = at.Add(time.Millisecond)
		fmt.Fprintf(&b, "10.2.%d.%d - - [%s] \"GET /api/x HTTP/1.1\" 200 1 \"-\" \"-\"\n", i/250, i%250, at.Format(accesslog.CombinedTime))
		if i%10 == 0 { // the abusive client, all along
			fmt.Fprintf(&b, "203.0.113.66 - - [%s] \"POST /login HTTP/1.1\" 200 1 \"-\" \"-\"\n", at.Format(accesslog.CombinedTime))
		}
	}
	b.WriteString("10.0.0.1 - - [" + at.Format(accesslog.CombinedTime) + "] \"GET /" + strings.Repeat("a", 100_000) + " HTTP/1.1\" 200 1 \"-\" \"-\"\n")
	rep := replayString(t, b.String(), samplePolicy, 400)
	api, login := rep.limits[1], rep.limits[0]
	if held := len(api.keys.m); held > 100 || api.keys.forgotten < 4900 || api.checked != 5000 {
		t.Errorf("api: %d keys held (at most 100), %d forgotten, %d checked", held, api.keys.forgotten, api.checked)
	}
	if n, exact := api.keys.count(); exact || n < 4750 || n > 5250 { // HyperLogLog: 1.6% standard error
		t.Errorf("api: %d keys counted (exact %v), want about 5,000", n, exact)
	}
	if ks := login.keys.m[loginKey(login)]; ks == nil || ks.refused != 500-30 { // 500 logins within 5 s: 30 admitted in minute 00:00
		t.Errorf("login: %+v", login.keys.m)
	}
	if rep.bad.Total != 1 || rep.bad.Reasons["line longer than 64 KiB"] == nil {
		t.Errorf("unreadable: %+v", rep.bad)
	}
	var text bytes.Buffer
	rep.WriteText(&text, 5, 80)
	if !strings.Contains(text.String(), "keys used least were forgotten") {
		t.Errorf("the report does not say keys were forgotten:\n%s", text.String())
	}
}

// loginKey is the key of the only client the login limit holds.
func loginKey(ls *limitStats) string {
	for k := range ls.keys.m {
		return k
	}
	return ""
}

// TestRunConcurrencyAndShadow: a concurrency limit holds each admitted
// request's lease for its logged duration; a shadow rule's checks run for
// admitted requests only, its refusals counted. Five requests at 0 s and
// five at 10 s, lasting 10 s each, against 2 in flight: 2 admitted and 3
// refused each time; the shadow limit of 1 a minute refuses 3 of the 4.
func TestRunConcurrencyAndShadow(t *testing.T) {
	var b strings.Builder
	for _, at := range []int{0, 0, 0, 0, 0, 10, 10, 10, 10, 10} {
		fmt.Fprintf(&b, `{"time": %d, "path": "/work", "ip": "192.0.2.1", "duration": 10, "status": 200}`+"\n", day.Unix()+int64(at))
	}
	rep := replayString(t, b.String(), `rules:
  - name: work
    limits:
      - {name: inflight, key: global, algorithm: concurrency, limit: 2, lease_ttl: 1m}
  - name: watch
    limits:
      - {name: per-client, key: ip, algorithm: fixed_window, limit: 1, window: 1m}
    action: {refuse: shadow}
`, 1000)
	work, watch := rep.limits[0], rep.limits[1]
	if rep.requests != 10 || work.checked != 10 || work.refused != 6 || !watch.shadow || watch.checked != 4 || watch.refused != 3 {
		t.Errorf("%d requests; work %d checked, %d refused; watch %d checked, %d refused", rep.requests, work.checked, work.refused, watch.checked, watch.refused)
	}
	if ks := work.keys.m[loginKey(work)]; ks == nil || ks.refused != 6 || !ks.firstRefused.Equal(day) || !ks.lastRefused.Equal(day.Add(10*time.Second)) {
		t.Errorf("work's key: %+v", ks)
	}
}

// TestRunPeaksAndInvalid: a key's peak is the most it sent within the
// limit's window (aligned, for a fixed window); a request planning
// refuses is counted by reason, not decided; an out-of-order line is
// decided at the time before it.
func TestRunPeaksAndInvalid(t *testing.T) {
	line := func(at time.Duration, ip, path string) string {
		return fmt.Sprintf("%s - - [%s] \"GET %s HTTP/1.1\" 200 1 \"-\" \"-\"\n", ip, day.Add(at).Format(accesslog.CombinedTime), path)
	}
	log := line(0, "10.0.0.1", "/api/a") + line(30*time.Second, "10.0.0.1", "/api/a") + line(20*time.Second, "10.0.0.1", "/api/a") +
		line(61*time.Second, "10.0.0.1", "/api/a") + line(62*time.Second, "10.0.0.2", "*")
	rep := replayString(t, log, samplePolicy, 1000)
	api := rep.limits[1]
	if api.checked != 4 || rep.outOfOrder != 1 || rep.outcomes[decide.Admitted] != 4 || rep.invalidReasons.Total != 1 {
		t.Fatalf("%d checked, %d out of order, outcomes %v, invalid %+v", api.checked, rep.outOfOrder, rep.outcomes, rep.invalidReasons)
	}
	if peaks := api.keys.peakList(); !slices.Equal(peaks, []int64{3}) {
		t.Errorf("peaks %v, want [3] (three in the minute from 0)", peaks)
	}
	if n, exact := api.keys.count(); n != 1 || !exact {
		t.Errorf("%d keys (exact %v)", n, exact)
	}
}

// TestSeriesBounded: a series holds at most maxBuckets buckets, merged
// into wider ones as the span grows, its total kept; resampling into
// wider columns keeps the total too.
func TestSeriesBounded(t *testing.T) {
	var s series
	for i := range 10_000 {
		s.add(day, day.Add(time.Duration(i)*time.Second), 1)
	}
	total := 0
	for _, n := range s.counts {
		total += n
	}
	if len(s.counts) > maxBuckets || s.width != 10*time.Second || total != 10_000 {
		t.Errorf("%d buckets of %v, total %d", len(s.counts), s.width, total)
	}
	cols := s.resampled(time.Hour, 10_000*time.Second)
	if len(cols) != 3 || cols[0] != 3600 || cols[1] != 3600 || cols[2] != 2800 {
		t.Errorf("resampled by hour: %v", cols)
	}
}

// TestDistinct: the HyperLogLog estimate of distinct keys is within 5%
// of the truth (1.6% standard error), and exact-ish when small.
func TestDistinct(t *testing.T) {
	var d distinct
	for i := range 100_000 {
		d.add(fmt.Sprintf("key-%d", i%50_000))
	}
	if n := d.estimate(); n < 47_500 || n > 52_500 {
		t.Errorf("estimate %d, want about 50,000", n)
	}
	var small distinct
	for i := range 100 {
		small.add(fmt.Sprint(i))
	}
	if n := small.estimate(); n < 97 || n > 103 {
		t.Errorf("estimate %d, want about 100", n)
	}
}

// TestText: counts with thousands separators, percentages to a tenth,
// percentiles as the least value at least q% do not exceed.
func TestText(t *testing.T) {
	if commas(1234567) != "1,234,567" || commas(-1000) != "-1,000" || commas(999) != "999" {
		t.Error("commas")
	}
	if percent(1, 3) != "33.3%" || percent(0, 0) != "0%" {
		t.Error("percent")
	}
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if quantile(sorted, 50) != 5 || quantile(sorted, 90) != 9 || quantile(sorted, 99) != 10 || quantile(nil, 50) != 0 {
		t.Error("quantile")
	}
}

// TestMeasureLimit: peaks are measured as the limit counts: a fixed
// window by aligned windows, the rest by a sliding window of the same
// period (a bucket's rate's), concurrency not at all.
func TestMeasureLimit(t *testing.T) {
	for _, c := range []struct {
		l    sluice.Limit
		want sluice.Algorithm
		ok   bool
	}{
		{sluice.FixedWindow(5, time.Minute), sluice.AlgorithmFixedWindow, true},
		{sluice.SlidingLog(5, time.Minute), sluice.AlgorithmSlidingWindow, true},
		{sluice.GCRA(sluice.PerSecond(5), 5), sluice.AlgorithmSlidingWindow, true},
		{sluice.Concurrency(5, time.Minute), 0, false},
	} {
		m, ok := measureLimit(c.l)
		if ok != c.ok || ok && (m.Algorithm != c.want || m.Period != c.l.Period || m.Count != measureHuge) {
			t.Errorf("%s: %v, %v", c.l, m, ok)
		}
	}
}

// TestSizeKeys: keys most of whose requests failed are left out, and
// keys above the outlier fence max(Q3 + 3×IQR, 3×Q3); no fence under 8
// keys; the percentile needs 100/(100-P) keys.
func TestSizeKeys(t *testing.T) {
	kt := keyTable{max: 1000}
	for i := range 10 {
		ks := kt.get(fmt.Sprintf("normal%d", i))
		ks.requests, ks.peak = 10, int64(2+i%2)
	}
	ks := kt.get("scraper")
	ks.requests, ks.peak = 500, 480
	ks = kt.get("stuffer")
	ks.requests, ks.failed, ks.peak = 60, 60, 5
	s := sizeKeys(&kt, false, false)
	if len(s.peaks) != 10 || s.fence != 9 || len(s.outliers) != 1 || s.outliers[0].key != "scraper" || len(s.failing) != 1 || s.failing[0].key != "stuffer" || s.countKeys != 12 {
		t.Errorf("%+v", s)
	}
	if s := sizeKeys(&kt, true, true); len(s.peaks) != 12 || s.fence != 0 {
		t.Errorf("counting all: %+v", s)
	}
	if f, _, _ := outlierFence([]int64{1, 2, 3}); f != 0 {
		t.Errorf("fence of 3 keys: %d", f)
	}
	if keysForPercentile(99) != 100 || keysForPercentile(99.9) != 1000 || keysForPercentile(100) != 0 {
		t.Error("keysForPercentile")
	}
	if w := s.warnings("per-ip", 99); len(w) != 2 || !strings.Contains(w[0], "10 keys counted") {
		t.Errorf("warnings %q", w)
	}
}

// TestSetCounts: a policy's counts are set where written (limit: or the
// count of rate:), its comments and layout kept, other limits unchanged.
func TestSetCounts(t *testing.T) {
	in := "# top\nrules:\n  - name: a\n    limits:\n      # per client\n      - name: x\n        key: ip\n        algorithm: sliding_window\n        rate: 100/m\n      - {name: y, key: ip, algorithm: fixed_window, limit: 5, window: 1m}\n      - {name: z, key: ip, algorithm: gcra, rate: 10/s, burst: 10}\n"
	out, err := setCounts([]byte(in), map[string]int64{"a\x00x": 2, "a\x00y": 7})
	if err != nil {
		t.Fatal(err)
	}
	want := "# top\nrules:\n  - name: a\n    limits:\n      # per client\n      - name: x\n        key: ip\n        algorithm: sliding_window\n        rate: 2/m\n      - {name: y, key: ip, algorithm: fixed_window, limit: 7, window: 1m}\n      - {name: z, key: ip, algorithm: gcra, rate: 10/s, burst: 10}\n"
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	if _, err := setCounts([]byte("a: 1\n"), nil); err == nil {
		t.Error("no rules: no error")
	}
}

// TestGlobalLimit: --safe-rate × --instances × --headroom, rounded down,
// in the rate's own unit.
func TestGlobalLimit(t *testing.T) {
	f := Suggest{SafeRate: "100/s", Instances: 3, Headroom: 0.8}
	if g, err := f.globalLimit(); err != nil || g != "240/s" {
		t.Errorf("%q, %v", g, err)
	}
	f = Suggest{SafeRate: "7/250ms", Instances: 1, Headroom: 0.5}
	if g, err := f.globalLimit(); err != nil || g != "3/250ms" {
		t.Errorf("%q, %v", g, err)
	}
	f.Headroom = 2
	if _, err := f.globalLimit(); err == nil || !strings.Contains(err.Error(), "--headroom 2") {
		t.Errorf("headroom 2: %v", err)
	}
}
