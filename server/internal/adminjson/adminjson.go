// Package adminjson writes the answers of the admin listener's JSON API
// (/admin/keys, /admin/bans, /admin/overrides): a value, or an error as
// {"error": "..."}, never cached. internal/adminclient reads them.
package adminjson

import (
	"encoding/json"
	"net/http"
)

// Write answers v as JSON with status 200.
func Write(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// Error answers status with msg, a sentence an operator can act on, as
// {"error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
