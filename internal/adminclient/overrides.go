package adminclient

import (
	"bytes"
	"net/http"
	"net/url"
	"time"
)

// SetOverride sets the runtime override of limit for key (PUT
// /admin/overrides/{limit}/{key}) with body, the JSON of what it does
// ({"scale": 5, "ttl": "1h", "reason": "..."}); the answer is the
// override as kept, an OverrideAnswer.
func (kc *Client) SetOverride(limit, key string, body []byte) ([]byte, error) {
	req, err := http.NewRequest("PUT", kc.overrideURL(limit, key), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return kc.do(req)
}

// DeleteOverride deletes the runtime override of limit for key (DELETE
// /admin/overrides/{limit}/{key}).
func (kc *Client) DeleteOverride(limit, key string) ([]byte, error) {
	req, err := http.NewRequest("DELETE", kc.overrideURL(limit, key), nil)
	if err != nil {
		return nil, err
	}
	return kc.do(req)
}

// Overrides lists the runtime overrides (GET /admin/overrides), an
// OverridesAnswer.
func (kc *Client) Overrides() ([]byte, error) {
	req, err := http.NewRequest("GET", kc.base.String()+"/admin/overrides", nil)
	if err != nil {
		return nil, err
	}
	return kc.do(req)
}

func (kc *Client) overrideURL(limit, key string) string {
	return kc.base.String() + "/admin/overrides/" + url.PathEscape(limit) + "/" + url.PathEscape(key)
}

// OverrideAnswer is one runtime override as the server keeps it.
type OverrideAnswer struct {
	Limit     string         `json:"limit"`
	Key       string         `json:"key"`
	Scale     float64        `json:"scale"`
	Unlimited bool           `json:"unlimited"`
	Spec      map[string]any `json:"spec"`
	Reason    string         `json:"reason"`
	By        string         `json:"by"`
	SetAt     time.Time      `json:"set_at"`
	ExpiresAt time.Time      `json:"expires_at"`
}

// OverridesAnswer is the list of GET /admin/overrides.
type OverridesAnswer struct {
	Overrides []OverrideAnswer `json:"overrides"`
}

// Bans lists the bans running (GET /admin/bans), a BansAnswer.
func (kc *Client) Bans() ([]byte, error) {
	req, err := http.NewRequest("GET", kc.base.String()+"/admin/bans", nil)
	if err != nil {
		return nil, err
	}
	return kc.do(req)
}

// BansAnswer is the list of GET /admin/bans.
type BansAnswer struct {
	Bans []struct {
		Rule        string   `json:"rule"`
		Limit       string   `json:"limit"`
		Values      []string `json:"values"`
		Key         string   `json:"key"`
		BannedForMs int64    `json:"banned_for_ms"`
	} `json:"bans"`
}
