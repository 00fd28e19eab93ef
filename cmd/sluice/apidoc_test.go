package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDocsAPIAnswers: every answer docs/api.md shows for POST /v1/check is
// what a running server answers. The section's policy (its yaml block)
// is served; a json block after a comment "<!-- answer: request R, send
// N" is the answer to the section's R-th curl sent the N-th time, equal to
// the server's but for what the clock moves: durations
// (*_ms fields, the t= of RateLimit, Retry-After) must only agree on being
// zero or not.
func TestDocsAPIAnswers(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## POST /v1/check")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)(<!-- answer: request (\\d+), send (\\d+)[^\n]*-->\n)?```(yaml|sh|json)\n(.*?)```").FindAllStringSubmatch(section, -1)
	dir := t.TempDir()
	var p *proc
	var bodies []string
	sent := map[int]int{}
	answers := 0
	for _, b := range blocks {
		switch kind, text := b[4], b[5]; {
		case kind == "yaml" && p == nil:
			policy := filepath.Join(dir, "policy.yaml")
			writeFile(t, policy, text)
			p = start(t, nil, "--policy", policy)
		case kind == "sh":
			_, req, ok := strings.Cut(text, "/v1/check -d '")
			if !ok {
				continue
			}
			body, _, _ := strings.Cut(req, "'")
			bodies = append(bodies, body)
		case kind == "json" && b[2] != "":
			r, _ := strconv.Atoi(b[2])
			n, _ := strconv.Atoi(b[3])
			if p == nil || r < 1 || r > len(bodies) {
				t.Fatalf("an answer to request %d before the policy or the request:\n%s", r, text)
			}
			var got string
			for ; sent[r] < n; sent[r]++ {
				got = do(t, "POST", p.url("api", "/v1/check"), bodies[r-1]).body
			}
			if got == "" {
				t.Fatalf("answer %d of request %d, already sent %d times", n, r, sent[r])
			}
			compareAnswers(t, text, got)
			answers++
		}
	}
	if answers < 2 {
		t.Fatalf("%d answers checked in docs/api.md, want at least 2 (the policy form and the explicit one)", answers)
	}
}

// compareAnswers checks the answer a doc shows against the server's.
func compareAnswers(t *testing.T, doc, got string) {
	t.Helper()
	var want, have any
	if err := json.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatalf("docs/api.md: an answer that is not JSON (%v):\n%s", err, doc)
	}
	if err := json.Unmarshal([]byte(got), &have); err != nil {
		t.Fatalf("the server: %v\n%s", err, got)
	}
	if w, h := clockless("", want), clockless("", have); !reflect.DeepEqual(w, h) {
		t.Errorf("docs/api.md shows\n%s\nthe server answers\n%s", doc, got)
	}
}

var rateLimitT = regexp.MustCompile(`;t=\d+`)

// clockless is v with what the clock moves reduced to zero or not.
func clockless(name string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = clockless(k, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = clockless(name, e)
		}
		return out
	case float64:
		if strings.HasSuffix(name, "_ms") {
			return x > 0
		}
	case string:
		switch name {
		case "RateLimit":
			return rateLimitT.ReplaceAllString(x, ";t=N")
		case "Retry-After":
			return x != "0"
		}
	}
	return v
}
