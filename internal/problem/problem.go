// Package problem writes the RFC 9457 problem documents sluice answers
// with: httplimit's refusals and failures, and sluice serve's errors.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Body is a problem document of type about:blank with title, status,
// detail and the extension members ext (strings and numbers), as JSON
// ending in a newline.
func Body(status int, title, detail string, ext map[string]any) []byte {
	doc := map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail}
	for k, v := range ext {
		doc[k] = v
	}
	body, _ := json.Marshal(doc) // only strings and numbers: cannot fail
	return append(body, '\n')
}

// Write answers with status and the problem document Body.
func Write(w http.ResponseWriter, status int, title, detail string, ext map[string]any) {
	body := Body(status, title, detail, ext)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
