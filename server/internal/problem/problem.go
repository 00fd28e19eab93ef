// Package problem writes the RFC 9457 problem documents (application/problem+json)
// that sluice serve's HTTP endpoints answer errors with.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Write answers status with a problem document of title and detail.
func Write(w http.ResponseWriter, status int, title, detail string) {
	body := Body(status, title, detail)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// Body is the problem document of status, title and detail, with a final newline.
func Body(status int, title, detail string) []byte {
	body, _ := json.Marshal(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
	return append(body, '\n')
}
