package decide

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestRefusalLogBounded: a million refusals over a hundred thousand keys
// make one line, with exact totals, the ten heaviest keys, and a count of
// the rest, while the log holds at most maxTrackedKeys keys.
func TestRefusalLogBounded(t *testing.T) {
	var buf bytes.Buffer
	l := newRefusalLog(slog.New(slog.NewJSONHandler(&buf, nil)), "refused", asIs)
	l.interval = 0 // flushed by hand
	for i := range 1_000_000 {
		switch {
		case i%10 == 0:
			l.add("per-user", "per-user\x00hot") // 100,000
		case i%10 == 1:
			l.add("per-ip", "per-ip\x00203.0.113.7") // 100,000
		default:
			l.add("per-ip", fmt.Sprint("per-ip\x00", i%100_000))
		}
		if len(l.byKey) > maxTrackedKeys {
			t.Fatalf("tracking %d keys", len(l.byKey))
		}
	}
	l.flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var line struct {
		Refused int
		ByLimit map[string]int `json:"by_limit"`
		TopKeys map[string]struct {
			Limit, Key string
			Refused    int
		} `json:"top_keys"`
		MoreKeys        int  `json:"more_keys"`
		MoreKeysRefused int  `json:"more_keys_refused"`
		Untracked       bool `json:"more_keys_untracked"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	if line.Refused != 1_000_000 || line.ByLimit["per-user"] != 100_000 || line.ByLimit["per-ip"] != 900_000 {
		t.Fatalf("totals: %s", lines[0])
	}
	if len(line.TopKeys) != maxListedKeys || line.TopKeys["1"].Refused != 100_000 || line.TopKeys["2"].Refused != 100_000 ||
		line.TopKeys["1"].Key != "per-ip\x00203.0.113.7" || line.TopKeys["2"].Key != "per-user\x00hot" {
		t.Fatalf("top keys: %+v", line.TopKeys)
	}
	listed := 0
	for _, k := range line.TopKeys {
		listed += k.Refused
	}
	if listed+line.MoreKeysRefused != 1_000_000 || line.MoreKeys != maxTrackedKeys-maxListedKeys || !line.Untracked {
		t.Fatalf("listed %d + more %d (%d keys, untracked %t), want 1,000,000 in all", listed, line.MoreKeysRefused, line.MoreKeys, line.Untracked)
	}
	// The next interval starts empty, and an empty interval logs nothing.
	buf.Reset()
	l.flush()
	l.add("per-ip", "per-ip\x00x")
	l.flush()
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), `"refused":1,`) {
		t.Fatalf("second interval: %s", buf.String())
	}
}

// TestRefusalLogInjection: a key carrying a newline cannot forge a log
// line in the text format.
func TestRefusalLogInjection(t *testing.T) {
	var buf bytes.Buffer
	l := newRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)), "refused", asIs)
	l.interval = 0
	l.add("q", "x\nlevel=ERROR msg=forged")
	l.flush()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines: %s", n, buf.String())
	}
}

func asIs(key string) string { return key }

func TestWaitQueue(t *testing.T) {
	q := waitQueue{max: 2}
	if !q.enter("a") || !q.enter("a") || q.enter("a") || !q.enter("b") {
		t.Fatal("places per limit")
	}
	q.leave("a")
	if !q.enter("a") || q.waiting("a") != 2 {
		t.Fatal("a place given back was not reused")
	}
	q.leave("a")
	q.leave("a")
	q.leave("b")
	if len(q.n) != 0 {
		t.Fatalf("names left behind: %v", q.n)
	}
	for i := range maxWaitingNames {
		q.enter(fmt.Sprint(i))
	}
	if q.enter("one too many") {
		t.Fatal("names beyond the bound admitted to wait")
	}
	if (&waitQueue{max: -1}).enter("a") {
		t.Fatal("negative max let a request wait")
	}
}
