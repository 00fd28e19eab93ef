package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/accesslog"
)

// smallLog writes ten minutes of an nginx log, 09:00 to 09:09:
//
//   - 30 normal clients, 10.2.0.1 to 10.2.0.30: client i sends
//     6 + (7i + 3m) % 13 requests (6 to 18) in minute m, GET /items/N,
//     spread over the minute, all 200; and logs in once, POST /login 200
//     at second 30 of minute i % 10, after a mistyped password (401) at
//     second 29 when i % 5 == 0;
//   - a scraper, 198.51.100.9: 480 GET /items/N a minute, 8 a second,
//     all 200;
//   - a credential stuffer, 198.51.100.77: POST /login once a second, 60 a
//     minute, all 401.
func smallLog(t *testing.T) string {
	t.Helper()
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	var rs []sampleRequest
	var codes []int
	for m := range 10 {
		minute := start.Add(time.Duration(m) * time.Minute)
		for i := range 30 {
			ip := fmt.Sprintf("10.2.0.%d", i+1)
			k := 6 + (7*i+3*m)%13
			for j := range k {
				rs = append(rs, sampleRequest{at: minute.Add(time.Duration(j*60/k) * time.Second), ip: ip, method: "GET", path: fmt.Sprintf("/items/%d", j)})
				codes = append(codes, 200)
			}
			if i%10 == m {
				if i%5 == 0 {
					rs = append(rs, sampleRequest{at: minute.Add(29 * time.Second), ip: ip, method: "POST", path: "/login"})
					codes = append(codes, 401)
				}
				rs = append(rs, sampleRequest{at: minute.Add(30 * time.Second), ip: ip, method: "POST", path: "/login"})
				codes = append(codes, 200)
			}
		}
		for j := range 480 {
			rs = append(rs, sampleRequest{at: minute.Add(time.Duration(j) * time.Second / 8), ip: "198.51.100.9", method: "GET", path: fmt.Sprintf("/items/%d", m*480+j)})
			codes = append(codes, 200)
		}
		for s := range 60 {
			rs = append(rs, sampleRequest{at: minute.Add(time.Duration(s) * time.Second), ip: "198.51.100.77", method: "POST", path: "/login"})
			codes = append(codes, 401)
		}
	}
	for i := range rs {
		rs[i].user = strconv.Itoa(codes[i]) // carried through the sort
	}
	sortByTime(rs)
	var b bytes.Buffer
	for _, r := range rs {
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" %s 512 \"-\" \"client/1.0\"\n", r.ip, r.at.Format(accesslog.CombinedTime), r.method, r.path, r.user)
	}
	path := filepath.Join(t.TempDir(), "access.log")
	writeFile(t, path, b.String())
	return path
}

// refusedByKey replays log through pol and returns each key's refusals
// under each limit ("limit key" -> refused).
func refusedByKey(t *testing.T, log, pol string) map[string]int {
	t.Helper()
	out, stderr, code := runSluice(t, "replay", "--log", log, "--policy", pol, "--csv")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("replay --csv: %v\n%s", err, out)
	}
	m := map[string]int{}
	for _, row := range rows[1:] {
		n, _ := strconv.Atoi(row[4])
		m[row[1]+" "+row[2]] = n
	}
	return m
}

// TestSuggestSmallLogLeavesOutAbuse: on ten minutes of 30 normal clients
// (peaks up to 18 a minute), a scraper (480 a minute) and a credential
// stuffer (all 401), the 99th percentile of 32 keys was the scraper's
// peak: suggest proposed 480-odd a minute. It must warn that 30 keys are
// too few for p99 (100 are needed for one key above it), leave out the
// stuffer (its requests failed) and the scraper (above the outlier
// fence), list both, and propose a limit that refuses none of the normal
// clients and refuses the scraper.
func TestSuggestSmallLogLeavesOutAbuse(t *testing.T) {
	log := smallLog(t)
	stdout, stderr, code := runSluice(t, "suggest", "--log", log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"# WARNING: per-ip: 30 keys counted: the 99th percentile of fewer than 100 keys is the busiest one's peak",
		"#   left out as probable abuse (the limit refuses them):\n",
		"#     198.51.100.9: peak ",
		"#     198.51.100.77: 600 of its 600 requests failed (4xx/5xx)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "sluice suggest: warning: per-ip: 30 keys counted") {
		t.Errorf("no warning on standard error: %q", stderr)
	}
	m := regexp.MustCompile(`\n        limit: (\d+)\n`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no limit in:\n%s", stdout)
	}
	if n, _ := strconv.Atoi(m[1]); n < 18 || n > 30 {
		t.Errorf("limit %d a minute: want the normal clients' peaks (18 in an aligned minute), far below the scraper's 480", n)
	}
	pol := filepath.Join(t.TempDir(), "suggested.yaml")
	writeFile(t, pol, stdout)
	refused := refusedByKey(t, log, pol)
	for i := range 30 {
		if n := refused[fmt.Sprintf("per-ip 10.2.0.%d", i+1)]; n != 0 {
			t.Errorf("normal client 10.2.0.%d refused %d times", i+1, n)
		}
	}
	if refused["per-ip 198.51.100.9"] == 0 {
		t.Errorf("the scraper is not refused: %v", refused)
	}
}

// TestSuggestPolicyLeavesOutFailed: with --policy, a login limit of 5 a
// minute was raised to 60 to fit a credential stuffer whose requests all
// got 401. The stuffer's key must be left out (and listed), and the login
// limit not raised: the normal clients log in at most twice a minute (a
// mistyped password, then the right one: their 401 counts, as it counts
// against the limit in service).
func TestSuggestPolicyLeavesOutFailed(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, `rules:
  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: per-ip, key: ip, algorithm: fixed_window, limit: 5, window: 1m}
`)
	log := smallLog(t)
	stdout, stderr, code := runSluice(t, "suggest", "--log", log, "--policy", pol)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"# login/per-ip: peaks p50 1, p90 2, p99 2, max 2 in 1m (30 keys counted); was 5, now 2\n",
		"#     198.51.100.77: 600 of its 600 requests failed (4xx/5xx), peak 60 in 1m (--count-failed counts it)\n",
		"{name: per-ip, key: ip, algorithm: fixed_window, limit: 2, window: 1m}",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	// Counting its failed requests, the stuffer is still left out: its
	// peak is far above the others' (fence max(Q3 1 + 3×0, 3×1) = 3).
	stdout, _, code = runSluice(t, "suggest", "--log", log, "--policy", pol, "--count-failed")
	if want := "#     198.51.100.77: peak 60 in 1m, above the outlier fence 3 "; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("--count-failed: exit %d, no %q in:\n%s", code, want, stdout)
	}
	// Asked to keep both, it sizes from the stuffer as before.
	stdout, _, code = runSluice(t, "suggest", "--log", log, "--policy", pol, "--count-failed", "--keep-outliers")
	if want := "was 5, now 60 (higher"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("--count-failed --keep-outliers: exit %d, no %q in:\n%s", code, want, stdout)
	}
}

// TestReplayAxisOneUnit: ten minutes of log in 10 s columns were labelled
// 0s, 100s, 200s, 5m, 400s, 500s: one axis, two units. Every label of an
// axis has the same unit now, in the text report and in the SVG chart.
func TestReplayAxisOneUnit(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "rules:\n  - name: login\n    match: {methods: [POST], path: /login}\n    limits:\n      - {name: per-ip, key: ip, algorithm: fixed_window, limit: 5, window: 1m}\n")
	svg := filepath.Join(dir, "replay.svg")
	out, stderr, code := runSluice(t, "replay", "--log", smallLog(t), "--policy", pol, "--width", "80", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "\n    0s        100s      200s      300s      400s      500s\n"; !strings.Contains(out, want) {
		t.Errorf("no %q in:\n%s", want, out)
	}
	simOut, _, _ := runSluice(t, "simulate", "--svg", svg)
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]bool{}
	for _, m := range regexp.MustCompile(`text-anchor="middle">[0-9.]+([a-z]+)<`).FindAllStringSubmatch(string(b), -1) {
		units[m[1]] = true
	}
	if len(units) != 1 {
		t.Errorf("simulate's SVG axis in units %v, want one:\n%s", units, simOut)
	}
}
