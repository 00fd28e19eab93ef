package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// simulateOut runs `sluice simulate args...` as a real process and returns
// its standard output; it fails the test on any other exit than 0.
func simulateOut(t *testing.T, args ...string) string {
	t.Helper()
	return simulateEnv(t, []string{"COLUMNS=80"}, args...)
}

// simulateEnv is simulateOut with variables added to the environment.
func simulateEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := execSluice(append([]string{"simulate"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice simulate %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// simLine is one row of the drawing.
type simLine struct {
	row            string
	admitted, most int
}

var (
	simHeadRE = regexp.MustCompile(`^(\S.*?): (\d+)(?: admitted(?:, at most (\d+) in any \S+)?)?`)
	simRowRE  = regexp.MustCompile(`^  ([.0-9+]+)$`)
)

// parseDrawing reads the drawing's rows by label: each a line "LABEL: N
// admitted..." followed by its row, indented by two.
func parseDrawing(t *testing.T, out string) map[string]simLine {
	t.Helper()
	rows := map[string]simLine{}
	out = strings.ReplaceAll(out, "\n    ", " ") // lines wrapped to the width
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		m, r := simHeadRE.FindStringSubmatch(lines[i]), simRowRE.FindStringSubmatch(lines[i+1])
		if m == nil || r == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		most, _ := strconv.Atoi(m[3])
		rows[m[1]] = simLine{row: r[1], admitted: n, most: most}
	}
	return rows
}

// TestSimulateHandWorked: a scenario small enough to work out by hand.
// Ten requests at 0.5 s and ten at 1.0 s against 10 per second:
//   - fixed_window admits all 20 (two windows, [0, 1s) and [1s, 2s)): 20
//     within half a second, its documented 2x at a boundary;
//   - sliding_log admits the first 10 and none at 1.0 s (within 1 s);
//   - the buckets start full (10), refill 5 in the half second;
//   - sliding_window weighs the previous window: at 1.0 s it is all
//     previous (10 · 1.0), nothing admitted.
func TestSimulateHandWorked(t *testing.T) {
	out := simulateOut(t, "--traffic", "pause 500ms, 10, pause 500ms, 10", "--slot", "250ms")
	rows := parseDrawing(t, out)
	want := map[string]simLine{ // columns of 250 ms: 10 arrive in the third, 10 in the fifth
		"arrivals":                     {"..+.+", 20, 0},
		"fixed_window(10 per 1s)":      {"..+.+", 20, 20},
		"sliding_log(10 per 1s)":       {"..+..", 10, 10},
		"sliding_window(10 per 1s)":    {"..+..", 10, 10},
		"token_bucket(10/s, burst 10)": {"..+.5", 15, 15},
		"gcra(10/s, burst 10)":         {"..+.5", 15, 15},
	}
	for label, w := range want {
		if got, ok := rows[label]; !ok {
			t.Errorf("no row %q in:\n%s", label, out)
		} else if got != w {
			t.Errorf("%s: %+v, want %+v\n%s", label, got, w, out)
		}
	}
	if !strings.Contains(out, "traffic: pause 500ms, 10, pause 500ms, 10: 20 requests over 1s\neach column 250ms: '.' none admitted, 1-9 that many, '+' ten or more") {
		t.Errorf("heading:\n%s", out)
	}
}

// TestSimulateDefault: the default picture holds every rate algorithm,
// each row adds up to its total, and each limit keeps its guarantee (at
// most N in any window for sliding_log, 2N for fixed_window, burst +
// rate·t for the buckets).
func TestSimulateDefault(t *testing.T) {
	out := simulateOut(t)
	rows := parseDrawing(t, out)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want arrivals and 7 algorithms:\n%s", len(rows), out)
	}
	for label, r := range rows {
		if len(r.row) != 70 { // 3.5 s in 50 ms columns
			t.Errorf("%s: %d columns, want 70", label, len(r.row))
		}
		sum, plus := 0, false
		for _, c := range r.row {
			switch {
			case c == '+':
				plus = true
			case c >= '1' && c <= '9':
				sum += int(c - '0')
			}
		}
		if !plus && sum != r.admitted || plus && sum >= r.admitted {
			t.Errorf("%s: row %s does not add up to %d", label, r.row, r.admitted)
		}
	}
	bounds := map[string]int{ // most in any 1 s
		"sliding_log(10 per 1s)":  10,
		"fixed_window(10 per 1s)": 20,
	}
	for label, most := range bounds {
		if r := rows[label]; r.most > most || r.most == 0 {
			t.Errorf("%s: at most %d in any 1s, want 1..%d", label, r.most, most)
		}
	}
	for _, label := range []string{"token_bucket(10/s, burst 10)", "gcra(10/s, burst 10)"} {
		if r := rows[label]; r.admitted > 10+35 || r.most > 10+10 {
			t.Errorf("%s: %d admitted (most %d in 1s); at most 45 (burst + 10/s · 3.5s), 20 in 1s", label, r.admitted, r.most)
		}
	}
	if !strings.Contains(strings.ReplaceAll(out, "\n    ", " "), "after a delay") {
		t.Errorf("the leaky bucket's delays are not shown:\n%s", out)
	}
}

// TestSimulateLimitsAndCSV: --limit draws the given limits; --csv prints a
// row per slot whose columns add up to the drawing's totals.
func TestSimulateLimitsAndCSV(t *testing.T) {
	args := []string{
		"--limit", "{algorithm: sliding_window, limit: 100, window: 1m}",
		"--limit", "{algorithm: gcra, rate: 100/m, burst: 20}",
		"--traffic", "300/m for 3m", "--slot", "5s",
	}
	rows := parseDrawing(t, simulateOut(t, args...))
	gcra := rows["gcra(100/m, burst 20)"]
	if _, ok := rows["sliding_window(100 per 1m)"]; !ok || gcra.admitted == 0 {
		t.Fatalf("rows: %+v", rows)
	}
	lines := strings.Split(strings.TrimSpace(simulateOut(t, append(args, "--csv")...)), "\n")
	if lines[0] != `slot_start_ms,arrivals,sliding_window(100 per 1m),"gcra(100/m, burst 20)"` {
		t.Errorf("CSV header %q", lines[0])
	}
	if len(lines) != 1+36 { // 3 minutes of 5 s
		t.Fatalf("%d CSV lines, want 37", len(lines))
	}
	sums := make([]int, 3)
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		for i := range sums {
			n, err := strconv.Atoi(f[i+1])
			if err != nil {
				t.Fatalf("CSV line %q: %v", l, err)
			}
			sums[i] += n
		}
	}
	if sums[0] != 900 || sums[2] != gcra.admitted {
		t.Errorf("CSV sums %v, want 900 arrivals and gcra %d", sums, gcra.admitted)
	}
	if lines[2][:5] != "5000," {
		t.Errorf("second slot starts %q, want 5000 ms", lines[2])
	}
}

// TestSimulatePolicy: --policy draws each limit of each rule, each
// override, and each rule with several limits as a whole, which admits no
// more than its strictest limit alone. A concurrency limit is drawn with
// each admitted request in flight for --hold.
func TestSimulatePolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, `rules:
  - name: api
    limits:
      - {name: per-ip, key: ip, algorithm: gcra, rate: 5/s, burst: 10, overrides: [{key: 192.0.2.1, scale: 2}, {key: 192.0.2.2, unlimited: true}]}
      - {name: all, key: global, algorithm: fixed_window, limit: 30, window: 1s}
      - {name: inflight, key: global, algorithm: concurrency, limit: 5, lease_ttl: 1m}
`)
	out := simulateOut(t, "--policy", path, "--traffic", "50, 20/s for 3s", "--slot", "250ms")
	rows := parseDrawing(t, out)
	ip, all, both := rows["api/per-ip: gcra(5/s, burst 10)"], rows["api/all: fixed_window(30 per 1s)"], rows["api: all 3 limits at once"]
	if ip.admitted == 0 || all.admitted == 0 || both.admitted == 0 || len(rows) != 7 {
		t.Fatalf("rows %+v in:\n%s", rows, out)
	}
	if both.admitted > min(ip.admitted, all.admitted) {
		t.Errorf("the rule admitted %d, more than its limits alone (%d, %d)", both.admitted, ip.admitted, all.admitted)
	}
	// The burst of 10 at once, then one per 200 ms (5/s) from 200 ms to the
	// last arrival at 2.95 s: 14. Twice the limit: 20, then one per 100 ms
	// from 100 ms: 29. Unlimited: all 110.
	for label, want := range map[string]int{
		"api/per-ip: gcra(5/s, burst 10)":                    10 + 14,
		"api/per-ip for key 192.0.2.1: gcra(10/s, burst 20)": 20 + 29,
		"api/per-ip for key 192.0.2.2: no limit":             110,
	} {
		if got := rows[label].admitted; got != want {
			t.Errorf("%s admitted %d, want %d", label, got, want)
		}
	}
	// 51 arrive at 0 (the burst and the first of 20/s): 5 are admitted and
	// hold their leases for 500 ms; then 5 more at 500, 550 ... 700 ms, and
	// so on: 5 in every other 250 ms column, 30 in all.
	if in := rows["api/inflight: concurrency(5, lease 1m)"]; in.row != "5.5.5.5.5.5." || in.admitted != 30 || !strings.Contains(out, "30 admitted, at most 5 in flight") {
		t.Errorf("inflight: %+v\n%s", in, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "rules:\n  - name: a\n    limits:\n      - {name: g, key: global, algorithm: gcra, rate: 5/s, brust: 2}\n")
	cmd := execSluice("simulate", "--policy", bad)
	msg, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(msg), bad+`:4: rule "a": limit "g": unknown field "brust"`) {
		t.Errorf("bad policy: exit %d, %s", cmd.ProcessState.ExitCode(), msg)
	}
}

// TestSimulateErrors: bad input is refused with exit 2 and a message that
// names the flag and what to write instead; nothing is drawn.
func TestSimulateErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--traffic", ""}, "--traffic: empty"},
		{[]string{"--traffic", "30, 40/s for"}, `--traffic: phase 2 "40/s for": want N`},
		{[]string{"--traffic", "pause -1s"}, `phase 1 "pause -1s": want a positive duration after pause`},
		{[]string{"--traffic", "lots"}, `phase 1 "lots": want N (N requests at once), RATE for DURATION, or pause DURATION`},
		{[]string{"--traffic", "40/x for 2s"}, `phase 1 "40/x for 2s"`},
		{[]string{"--traffic", "100000/s for 1h"}, "more than 1000000 requests in all"},
		{[]string{"--traffic", "9223372036854775807/s for 1d"}, "more than 1000000 requests in all"},
		{[]string{"--traffic", "10/s for 1h", "--slot", "1s"}, "3600 columns of --slot 1s, more than 2000; give a wider --slot"},
		{[]string{"--slot", "0s"}, `--slot "0s": want a positive duration`},
		{[]string{"--rate", "ten"}, "--rate:"},
		{[]string{"--limit", "{algorithm: concurrency, limit: 5, lease_ttl: 1m}", "--hold", "0s"}, `--hold "0s": want a positive duration`},
		{[]string{"--slot", "10ms"}, "--slot 10ms: 350 columns, wider than --width 80 allows (78)"},
		{[]string{"--width", "5"}, "--width 5: want 20 to 2000 columns"},
		{[]string{"--limit", "{algorithm: gcra, burst: 5}"}, "--limit 1"},
		{[]string{"--limit", "{algorithm: gcra, rate: 5/s, brust: 5}"}, `unknown field "brust"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--limit", "{algorithm: leaky_bucket, rate: 10/s, queue: 50}"}, "--limit 1: leaky_bucket(10/s, queue 50): the last queued request would wait 5s, longer than the server's max_delay of 1s, so sluice check refuses it"},
	}
	for _, c := range cases {
		cmd := execSluice(append([]string{"simulate"}, c.args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) || stdout.Len() > 0 {
			t.Errorf("sluice simulate %s: exit %d, stderr %q, stdout %q; want exit 2 and %q",
				fmt.Sprintf("%q", c.args), code, stderr.String(), stdout.String(), c.want)
		}
	}
}

// TestReadmeSimulate keeps README's `sluice simulate` commands working:
// each one is run (its single-quoted arguments split as a shell would) and
// must draw a row per limit; one with --svg FILE must write what FILE
// holds in the repository (README embeds it), so the command README gives
// to regenerate it is the one that made it.
func TestReadmeSimulate(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n, svgs := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "go run ./cmd/sluice simulate")
		if !ok {
			continue
		}
		n++
		args := shellWords(rest)
		var checkedIn string
		for i, a := range args {
			if a == "--svg" && i+1 < len(args) {
				checkedIn = filepath.Join("../..", args[i+1])
				args[i+1] = filepath.Join(t.TempDir(), "sim.svg")
				defer compareFiles(t, line, args[i+1], checkedIn)
				svgs++
			}
		}
		out := simulateOut(t, args...)
		if rows := parseDrawing(t, out); len(rows) < 2 {
			t.Errorf("README: %s: drew %d rows", line, len(rows))
		}
		for _, m := range delayRE.FindAllStringSubmatch(strings.ReplaceAll(out, "\n    ", " "), -1) {
			if d, err := time.ParseDuration(m[1]); err != nil || d > time.Second {
				t.Errorf("README: %s: draws a queue waiting %s, longer than the max_delay (1s) sluice check and serve allow", line, m[1])
			}
		}
	}
	if n == 0 || svgs == 0 {
		t.Errorf("README.md shows %d `go run ./cmd/sluice simulate` commands, %d with --svg; want both", n, svgs)
	}
	if !strings.Contains(string(b), "](docs/simulate.svg)") {
		t.Error("README.md does not embed docs/simulate.svg")
	}
}

// delayRE finds the longest shaping delay a row of the drawing waited.
var delayRE = regexp.MustCompile(`after a delay \(up to ([0-9.]+m?s)\)`)

// TestSimulateMaxDelay: the default set's leaky_bucket at --burst 50 and
// 10/s queues 5 s, a limit sluice check refuses (max_delay 1s): simulate
// drew it all the same. It is left out now, said so on standard error,
// and drawn with the --max-delay a server would need for it.
func TestSimulateMaxDelay(t *testing.T) {
	args := []string{"simulate", "--traffic", "100, 20/s for 5s", "--rate", "10/s", "--burst", "50"}
	stdout, stderr, code := runSluice(t, args...)
	if code != 0 || strings.Contains(stdout, "leaky_bucket") {
		t.Errorf("exit %d: draws the leaky bucket sluice check refuses:\n%s", code, stdout)
	}
	if want := "not drawn: leaky_bucket(10/s, queue 50): the last queued request would wait 5s, longer than the server's max_delay of 1s, so sluice check refuses it"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	rows := parseDrawing(t, simulateOut(t, append(args[1:], "--max-delay", "5s")...))
	if _, ok := rows["leaky_bucket(10/s, queue 50)"]; !ok {
		t.Errorf("--max-delay 5s: no leaky bucket in %v", rows)
	}
}

// shellWords splits a command line's arguments as a shell would, for
// single quotes only.
func shellWords(s string) []string {
	var args []string
	for i, part := range strings.Split(s, "'") {
		if i%2 == 1 {
			args = append(args, part) // quoted
		} else {
			args = append(args, strings.Fields(strings.TrimSuffix(strings.TrimSpace(part), "\\"))...)
		}
	}
	return args
}

// compareFiles fails the test unless the file made by command is the one
// checked in.
func compareFiles(t *testing.T, command, made, checkedIn string) {
	t.Helper()
	got, err1 := os.ReadFile(made)
	want, err2 := os.ReadFile(checkedIn)
	if err1 != nil || err2 != nil || string(got) != string(want) {
		t.Errorf("%s is not what README's command writes (%v, %v); run it again:\n%s", checkedIn, err1, err2, command)
	}
}

// TestSimulateWidth: the drawing fits $COLUMNS, or --width: the slot is
// the shortest nice one whose columns fit, and no line is wider (text
// lines are wrapped).
func TestSimulateWidth(t *testing.T) {
	for _, c := range []struct {
		env     string
		args    []string
		slot    string
		columns int
	}{
		{"COLUMNS=50", nil, "100ms", 35}, // 3.5 s over 48 columns: 73 ms, so 100 ms
		{"COLUMNS=80", nil, "50ms", 70},  // 45 ms, so 50 ms
		{"COLUMNS=50", []string{"--width", "200"}, "20ms", 175},
		{"COLUMNS=junk", nil, "50ms", 70}, // 80
	} {
		out := simulateEnv(t, []string{c.env}, c.args...)
		width := 80
		fmt.Sscanf(c.env, "COLUMNS=%d", &width)
		if len(c.args) > 0 {
			width = 200
		}
		if !strings.Contains(out, "each column "+c.slot+": ") {
			t.Errorf("%s %v: slot is not %s:\n%s", c.env, c.args, c.slot, out)
		}
		for label, r := range parseDrawing(t, out) {
			if len(r.row) != c.columns {
				t.Errorf("%s %v: %s has %d columns, want %d", c.env, c.args, label, len(r.row), c.columns)
			}
		}
		for _, l := range strings.Split(out, "\n") {
			if utf8.RuneCountInString(l) > width {
				t.Errorf("%s %v: a line of %d columns: %q", c.env, c.args, len(l), l)
			}
		}
	}
}

// TestChartColours: simulate's chart draws what was admitted and replay's
// what was refused, each in its outcome's colour on the status page
// (server/admin/status.html): blue meant admitted in one and refused in the
// other.
func TestChartColours(t *testing.T) {
	page, err := os.ReadFile("../../server/admin/status.html")
	if err != nil {
		t.Fatal(err)
	}
	colour := func(outcome string) string {
		m := regexp.MustCompile(`--` + outcome + `:(#[0-9a-fA-F]{6})`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("status.html has no --%s colour", outcome)
		}
		return strings.ToLower(string(m[1]))
	}
	admitted, refused := colour("admitted"), colour("refused")
	dir := t.TempDir()
	sim := filepath.Join(dir, "sim.svg")
	simulateOut(t, "--svg", sim)
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, samplePolicy)
	rep := filepath.Join(dir, "replay.svg")
	if _, stderr, code := runSluice(t, "replay", "--log", sampleLog(t, "combined"), "--policy", pol, "--svg", rep); code != 0 {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	for _, c := range []struct {
		file, outcome, want, not string
	}{{sim, "admitted", admitted, refused}, {rep, "refused", refused, admitted}} {
		b, err := os.ReadFile(c.file)
		svg := strings.ToLower(string(b))
		legend := `fill="` + c.want + `"/><text x="176" y="55">` + c.outcome + `</text>`
		if err != nil || !strings.Contains(svg, legend) || strings.Count(svg, `fill="`+c.want+`"`) < 2 || strings.Contains(svg, c.not) {
			t.Errorf("%s: want %s drawn in %s (legend %q), and no %s: %v\n%.600s", filepath.Base(c.file), c.outcome, c.want, legend, c.not, err, svg)
		}
	}
}
