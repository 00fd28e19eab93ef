package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/accesslog"
	rp "github.com/sluicehq/sluice/internal/replay"
	"github.com/sluicehq/sluice/policy"
)

// The sample day every replay and suggest test reads, generated here so
// that every answer can be worked out by hand:
//
//   - 200 normal clients, 10.1.0.1 to 10.1.1.100 (client i is
//     10.1.(i/100).(i%100+1)), each sending GET /api/items/i once in some
//     aligned minutes, at second 5 + i%50 of the minute: in every tenth
//     minute (minute m with m%10 == i%10), and in every minute of the
//     daily peak, 12:00 to 12:59. So 138 + 60 = 198 requests each, 39,600
//     in all, never more than one in an aligned minute.
//   - one abusive client, 203.0.113.66, sending POST /login once a second
//     from 10:00:00 to 10:09:59: 600 requests, 60 in each of ten minutes.
//   - three lines no format can read (a garbage line, a bad time, a bad
//     client address), after the requests.
//
// 40,200 requests, the first at 00:00:05 (client 0), the last at
// 23:59:54 (client 199, in minute 23:59). The busiest hour is 12:00 (200 × 60 = 12,000), the
// busiest minute 12:00 (200: its first minute), the busiest second
// 10:00:05 (the abusive client and the four normal clients i%50 == 0 with
// i%10 == 0, at second 5 of minute 10:00).
var sampleDay = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

type sampleRequest struct {
	at         time.Time
	ip, method string
	path, user string
}

func sampleRequests() []sampleRequest {
	var out []sampleRequest
	for m := 0; m < 24*60; m++ {
		minute := sampleDay.Add(time.Duration(m) * time.Minute)
		peak := minute.Hour() == 12
		if minute.Hour() == 10 && minute.Minute() < 10 {
			for s := 0; s < 60; s++ {
				out = append(out, sampleRequest{minute.Add(time.Duration(s) * time.Second), "203.0.113.66", "POST", "/login", "mallory"})
			}
		}
		for i := 0; i < 200; i++ {
			if peak || m%10 == i%10 {
				ip := fmt.Sprintf("10.1.%d.%d", i/100, i%100+1)
				out = append(out, sampleRequest{minute.Add(time.Duration(5+i%50) * time.Second), ip, "GET", fmt.Sprintf("/api/items/%d", i), fmt.Sprintf("user%d", i)})
			}
		}
	}
	// In time order, as a log is written (stable: the abusive client first
	// within a second).
	sortByTime(out)
	return out
}

func sortByTime(rs []sampleRequest) {
	slices.SortStableFunc(rs, func(a, b sampleRequest) int { return a.at.Compare(b.at) })
}

// sampleLog writes the sample day in a format: combined, json or csv.
func sampleLog(t *testing.T, format string) string {
	t.Helper()
	var b bytes.Buffer
	if format == "csv" {
		b.WriteString("ts,verb,uri,client,user\n")
	}
	for _, r := range sampleRequests() {
		switch format {
		case "combined":
			fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" 200 512 \"-\" \"sample/1.0\"\n", r.ip, r.at.Format(accesslog.CombinedTime), r.method, r.path)
		case "json":
			line, _ := json.Marshal(map[string]any{"time": float64(r.at.Unix()), "method": r.method, "path": r.path, "remote_addr": r.ip, "user": r.user})
			b.Write(append(line, '\n'))
		case "csv":
			fmt.Fprintf(&b, "%s,%s,%s,%s,%s\n", r.at.Format(time.RFC3339), r.method, r.path, r.ip, r.user)
		}
	}
	switch format {
	case "combined":
		b.WriteString("garbage\n10.0.0.1 - - [99/Foo/2026:00:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\nnot-an-ip - - [02/Mar/2026:23:59:59 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n")
	case "json":
		b.WriteString("garbage\n{\"time\": \"yesterday\", \"path\": \"/\", \"remote_addr\": \"10.0.0.1\"}\n{\"time\": 1772495999, \"path\": \"/\", \"remote_addr\": \"not-an-ip\"}\n")
	case "csv":
		b.WriteString("\"garbage\n2026-13-45T00:00:00Z,GET,/,10.0.0.1,x\n2026-03-02T23:59:59Z,GET,/,not-an-ip,x\n")
	}
	path := filepath.Join(t.TempDir(), "access."+format)
	writeFile(t, path, b.String())
	return path
}

// samplePolicy limits logins per client to 30 a minute (only the abusive
// client goes past it: 30 of its 60 in each of its ten minutes) and the
// API per client to 100 a minute (no one goes past it).
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

// TestReplaySampleDay: the sample day through the sample policy, in each
// format, gives the answers worked out by hand: the abusive client
// refused 30 times in each of its ten minutes (from second 30 to 59), no
// one else refused, the daily peak found, the unreadable lines counted.
func TestReplaySampleDay(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, samplePolicy)
	for _, c := range []struct {
		format string
		args   []string
		bad    string
	}{
		{"combined", nil, "not in combined log format (line 40201)"},
		{"json", []string{"--field", "ip=remote_addr"}, "not a JSON object (line 40201)"},
		{"csv", []string{"--field", "time=ts", "--field", "method=verb", "--field", "path=uri", "--field", "ip=4"}, "not a CSV line (line 40202)"},
	} {
		log := sampleLog(t, c.format)
		stdout, stderr, code := runSluice(t, append([]string{"replay", "--log", log, "--policy", pol}, c.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.format, code, stderr)
		}
		for _, want := range []string{
			"40,200 requests from 2026-03-02 00:00:05 UTC to 2026-03-02 23:59:54 UTC (23h59m49s)\n",
			"busiest second 10:00:05 (5 requests), minute 12:00 (200), hour 12:00 (12,000)\n",
			"outcomes: 39,900 admitted, 300 refused\n",
			"unreadable lines (skipped): 3\n", c.bad,
			"rule login, limit login-per-ip: fixed_window(30 per 1m)\n  600 checked, 300 refused (50.0%), 1 of 1 keys refused\n",
			"    203.0.113.66: 300 refused of 600; from 10:00:30 to 10:09:59; peak 60 in 1m\n",
			"rule api, limit api-per-ip: fixed_window(100 per 1m)\n  39,600 checked, 0 refused (0.0%), 0 of 200 keys refused\n",
			"  peak per key, the most in any 1m (aligned windows): p50 1, p90 1, p99 1, max 1\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: no %q in:\n%s", c.format, want, stdout)
			}
		}
	}
}

// TestReplayCSVAndSVG: --csv lists every key with its counts; --svg
// writes a chart with a panel per limit.
func TestReplayCSVAndSVG(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, samplePolicy)
	svg := filepath.Join(dir, "replay.svg")
	stdout, stderr, code := runSluice(t, "replay", "--log", sampleLog(t, "combined"), "--policy", pol, "--csv", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 1+1+200 || lines[0] != "rule,limit,key,requests,refused,first_refused,last_refused,peak,peak_window" {
		t.Fatalf("%d lines, header %q", len(lines), lines[0])
	}
	if want := "login,login-per-ip,203.0.113.66,600,300,2026-03-02T10:00:30Z,2026-03-02T10:09:59Z,60,1m"; lines[1] != want {
		t.Errorf("abusive client: %q, want %q", lines[1], want)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(b, []byte("<svg ")) || bytes.Count(b, []byte("rule login, limit login-per-ip")) != 1 || bytes.Count(b, []byte("rule api, limit api-per-ip")) != 1 {
		t.Errorf("svg (%v):\n%.400s", err, b)
	}
}

// TestSuggestSampleDay: sluice suggest on the sample day. Every normal
// client's peak is 1 request in an aligned minute and the abusive
// client's 60, above the outlier fence (max(Q3 1 + 3×IQR 0, 3×Q3) = 3):
// it is left out and listed, and the 99th percentile of the 200 keys
// counted is 1: a limit of 1 per minute, which refuses the
// abusive client 59 times in each of its ten minutes (590) and no one
// else. The safe rate 100/s × 3 instances × 0.8 is 240/s, far above the
// busiest second (5): nothing refused. The suggested policy passes sluice
// check, and sluice replay through it refuses what suggest said.
func TestSuggestSampleDay(t *testing.T) {
	log := sampleLog(t, "json")
	stdout, stderr, code := runSluice(t, "suggest", "--log", log, "--field", "ip=remote_addr", "--algorithm", "fixed_window", "--window", "1m",
		"--percentile", "99", "--safe-rate", "100/s", "--instances", "3", "--headroom", "0.8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"# (40,200 requests from 2026-03-02 00:00:05 UTC to 2026-03-02 23:59:54 UTC; 201 keys of ip).\n",
		"counts them: p50 1, p90 1, p99 1, max 1 (200 keys counted). A limit of 1 refuses none of\n",
		"#     203.0.113.66: peak 60 in 1m, above the outlier fence 3 (max(Q3 1 + 3×IQR 0, 3×Q3); --keep-outliers counts it)\n",
		"# global: the measured safe rate 100/s × 3 instances × headroom 0.8 = 240/s,\n",
		"#   per-ip: 590 of 40,200 requests (1.5%), from 1 of 201 keys: 203.0.113.66 (590)\n",
		"#   global: 0 of 40,200 requests (0.0%), from 0 of 1 keys\n",
		"        algorithm: fixed_window\n        limit: 1\n        window: 1m\n",
		"        key: global\n        algorithm: gcra\n        rate: 240/s\n        burst: 240\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	pol := filepath.Join(t.TempDir(), "suggested.yaml")
	writeFile(t, pol, stdout)
	if out, _, code := runSluice(t, "check", pol); code != 0 {
		t.Fatalf("sluice check of the suggestion: exit %d\n%s", code, out)
	}
	out, stderr, code := runSluice(t, "replay", "--log", log, "--field", "ip=remote_addr", "--policy", pol)
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"rule suggested, limit per-ip: fixed_window(1 per 1m)\n  40,200 checked, 590 refused (1.5%), 1 of 201 keys refused\n",
		"    203.0.113.66: 590 refused of 600; from 10:00:01 to 10:09:59; peak 60 in 1m\n",
		"rule suggested, limit global: gcra(240/s, burst 240)\n  40,200 checked, 0 refused (0.0%)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay of the suggestion: no %q in:\n%s", want, out)
		}
	}
}

// TestReplayErrors: bad command lines and files get exit 2 (usage) or 1
// (a file), with a message that says what to do; a log of nothing
// readable is reported, not fatal.
func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	pol, empty := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "empty.log")
	writeFile(t, pol, samplePolicy)
	writeFile(t, empty, "garbage\n")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", "--policy", pol}, 2, "--log: name the access log to replay"},
		{[]string{"replay", "--log", empty}, 2, "--policy: name the policy"},
		{[]string{"replay", "--log", filepath.Join(dir, "missing.log"), "--policy", pol}, 1, "no such file"},
		{[]string{"replay", "--log", empty, "--policy", pol, "--format", "xml"}, 2, `--format "xml": want auto, combined, json or csv`},
		{[]string{"replay", "--log", empty, "--policy", pol, "--field", "colour=x"}, 2, `"colour=x": NAME is time, method, path, host, ip, duration, status or header:NAME`},
		{[]string{"replay", "--log", empty, "--policy", pol, "--max-keys", "5"}, 2, "--max-keys 5: want at least 100"},
		{[]string{"suggest", "--log", filepath.Join(dir, "missing.log")}, 1, "no such file"},
		{[]string{"suggest", "--log", "-"}, 2, "--log -: suggest reads the log twice"},
		{[]string{"suggest", "--log", empty, "--percentile", "0"}, 2, "--percentile 0: want more than 0"},
		{[]string{"suggest", "--log", empty, "--algorithm", "gcra"}, 2, `--algorithm "gcra": want sliding_window or fixed_window`},
		{[]string{"suggest", "--log", empty, "--safe-rate", "fast"}, 2, "--safe-rate:"},
		{[]string{"suggest", "--log", empty, "--safe-rate", "10/s", "--headroom", "2"}, 2, "--headroom 2: want"},
		{[]string{"suggest", "--log", empty, "--key", "header:"}, 2, "--key, --window, --match or --name:"},
		{[]string{"suggest", "--log", empty}, 2, "no request had a value for --key ip (0 readable requests)"},
	} {
		stdout, stderr, code := runSluice(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, stdout, stderr, c.code, c.want)
		}
	}
	stdout, _, code := runSluice(t, "replay", "--log", empty, "--policy", pol)
	if code != 0 || !strings.Contains(stdout, "no request could be read from the log\nunreadable lines (skipped): 1\n") {
		t.Errorf("a log of garbage: exit %d\n%s", code, stdout)
	}
}

// TestReplayConcurrencyAndShadow: a concurrency limit holds each admitted
// request's lease for its logged duration, and a shadow rule's refusals
// are counted while its requests are admitted. Five requests at 00:00:00
// lasting 10 s each against 2 in flight: 2 admitted, 3 refused; five more
// at 00:00:10, when the first two have ended: 2 admitted, 3 refused. The
// shadow rule (1 a minute per client, one client) runs for the 4
// admitted requests only, and would refuse all but the first: 3.
func TestReplayConcurrencyAndShadow(t *testing.T) {
	dir := t.TempDir()
	log, pol := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "policy.yaml")
	var b strings.Builder
	for _, at := range []int{0, 0, 0, 0, 0, 10, 10, 10, 10, 10} {
		fmt.Fprintf(&b, `{"time": %d, "path": "/work", "ip": "192.0.2.1", "duration": 10}`+"\n", sampleDay.Unix()+int64(at))
	}
	writeFile(t, log, b.String())
	writeFile(t, pol, `rules:
  - name: work
    limits:
      - {name: inflight, key: global, algorithm: concurrency, limit: 2, lease_ttl: 1m}
  - name: watch
    limits:
      - {name: per-client, key: ip, algorithm: fixed_window, limit: 1, window: 1m}
    action: {refuse: shadow}
`)
	stdout, stderr, code := runSluice(t, "replay", "--log", log, "--policy", pol)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"outcomes: 4 admitted, 6 refused\n",
		"rule work, limit inflight: concurrency(2, lease 1m)\n  10 checked, 6 refused (60.0%), 1 of 1 keys refused\n",
		"rule watch, limit per-client: fixed_window(1 per 1m) (shadow: refusals counted, requests admitted)\n  4 checked, 3 refused (75.0%)",
		"    *: 6 refused of 10; from 00:00:00 to 00:00:10\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
}

// BenchmarkReplay replays the sample day (40,200 combined log lines)
// through the sample policy; ns/op over 40,200 is the cost of a line.
func BenchmarkReplay(b *testing.B) {
	dir := b.TempDir()
	log, pol := filepath.Join(dir, "access.log"), filepath.Join(dir, "policy.yaml")
	var buf bytes.Buffer
	for _, r := range sampleRequests() {
		fmt.Fprintf(&buf, "%s - - [%s] \"%s %s HTTP/1.1\" 200 512 \"-\" \"sample/1.0\"\n", r.ip, r.at.Format(accesslog.CombinedTime), r.method, r.path)
	}
	os.WriteFile(log, buf.Bytes(), 0o644)
	os.WriteFile(pol, []byte(samplePolicy), 0o644)
	p, err := policy.Load(pol, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rp.Run(&rp.Input{Log: log, Format: "auto", Fields: accesslog.DefaultFields, MaxKeys: 100_000}, p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSuggestSlidingWindow: sluice suggest's default, a sliding_window
// per minute, on the sample day, worked out by hand. A normal client's
// peak is 2: at a request, the previous minute's one request weighs
// ⌈1·(1 − s/60)⌉ = 1, plus this one. The abusive client's is 61: after a
// whole minute of 60, ⌈60·(1 − s/60)⌉ = 60 − s from before, s this minute,
// plus this one. So the 99th percentile is 2, and under 2 a minute the
// abusive client is admitted at 10:00:00 and 10:00:01 (then 3 > 2); at
// 10:01:30 (the previous 2 weigh ⌈2·0.5⌉ = 1: 1 + 0 + 1 = 2), and once in
// each of the next eight minutes, at its start (the previous 1 weighs 1):
// 11 admitted, 589 refused; no one else.
func TestSuggestSlidingWindow(t *testing.T) {
	stdout, stderr, code := runSluice(t, "suggest", "--log", sampleLog(t, "combined"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"counts them: p50 2, p90 2, p99 2, max 2 (200 keys counted). A limit of 2 refuses none of\n",
		"#   per-ip: 589 of 40,200 requests (1.5%), from 1 of 201 keys: 203.0.113.66 (589)\n",
		"        algorithm: sliding_window\n        limit: 2\n        window: 1m\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
}

// TestSuggestPolicy: with --policy, suggest sets the count of each window
// limit of an existing policy from its own keys' peaks and keeps the rest
// of the file (comments, layout, the other limits). On the sample day the
// per-client sliding_window per minute has the peaks worked out in
// TestSuggestSlidingWindow: it becomes 2 (from 100) and refuses 589 of
// the abusive client's requests; the gcra is left as written (its peaks
// in a sliding second: 1 for a normal client, 2 for the abusive one, its
// previous second's request weighing ⌈1·(1 − f)⌉ = 1). The result
// passes sluice check, and sluice replay through it refuses the same.
func TestSuggestPolicy(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, `# every client
rules:
  - name: all
    limits:
      # per client, per minute
      - name: per-client
        key: ip
        algorithm: sliding_window
        rate: 100/m
      - {name: bucket, key: ip, algorithm: gcra, rate: 10/s, burst: 10}
`)
	log := sampleLog(t, "combined")
	stdout, stderr, code := runSluice(t, "suggest", "--log", log, "--policy", pol)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"# all/per-client: peaks p50 2, p90 2, p99 2, max 2 in 1m (200 keys counted); was 100, now 2\n",
		"#     203.0.113.66: peak 61 in 1m, above the outlier fence 6 (max(Q3 2 + 3×IQR 0, 3×Q3); --keep-outliers counts it)\n",
		"# all/bucket: peaks p50 1, p90 1, p99 1, max 2 in 1s (201 keys counted); gcra left as written\n",
		"#   per-client: 589 of 40,200 requests (1.5%), from 1 of 201 keys: 203.0.113.66 (589)\n",
		"# every client\nrules:\n",
		"      # per client, per minute\n      - name: per-client\n        key: ip\n        algorithm: sliding_window\n        rate: 2/m\n",
		"      - {name: bucket, key: ip, algorithm: gcra, rate: 10/s, burst: 10}\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	suggested := filepath.Join(dir, "suggested.yaml")
	writeFile(t, suggested, stdout)
	if out, _, code := runSluice(t, "check", suggested); code != 0 {
		t.Fatalf("sluice check of the suggestion: exit %d\n%s", code, out)
	}
	out, _, code := runSluice(t, "replay", "--log", log, "--policy", suggested)
	if want := "rule all, limit per-client: sliding_window(2 per 1m)\n  40,200 checked, 589 refused (1.5%), 1 of 201 keys refused\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("replay of the suggestion: exit %d, no %q in:\n%s", code, want, out)
	}
}
