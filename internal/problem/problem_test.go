package problem_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/problem"
)

// TestWrite: the status, the media type, a Content-Length that matches,
// and a document with the standard members and the extensions.
func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	problem.Write(w, 429, "Too Many Requests", `Rate limit "api" exceeded.`, map[string]any{"limit": "api", "retry_after": 3})
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
		t.Fatalf("status %d, headers %v, body of %d bytes", w.Code, w.Header(), w.Body.Len())
	}
	var doc map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": 429.0, "detail": `Rate limit "api" exceeded.`, "limit": "api", "retry_after": 3.0}
	if len(doc) != len(want) {
		t.Fatalf("document %v, want %v", doc, want)
	}
	for k, v := range want {
		if doc[k] != v {
			t.Fatalf("document %v, want %v", doc, want)
		}
	}
	if b := w.Body.Bytes(); b[len(b)-1] != '\n' {
		t.Fatalf("body %q does not end in a newline", b)
	}
}
