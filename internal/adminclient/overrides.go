package adminclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
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

// What says what the override does, for people: "unlimited", "scale 5",
// or "limit" and its spec.
func (o OverrideAnswer) What() string {
	switch {
	case o.Unlimited:
		return "unlimited"
	case o.Scale != 0:
		return "scale " + strconv.FormatFloat(o.Scale, 'g', -1, 64)
	}
	b, _ := json.Marshal(o.Spec)
	return "limit " + string(b)
}

// Until says how long the override lasts, for people.
func (o OverrideAnswer) Until() string {
	if o.ExpiresAt.IsZero() {
		return "until deleted"
	}
	return "until " + o.ExpiresAt.UTC().Format(time.RFC3339)
}

// OverridesAnswer is the list of GET /admin/overrides.
type OverridesAnswer struct {
	Overrides []OverrideAnswer `json:"overrides"`
}

// WriteTable writes the list as a table for people, or "no overrides".
func (l OverridesAnswer) WriteTable(w io.Writer) {
	if len(l.Overrides) == 0 {
		fmt.Fprintln(w, "no overrides")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LIMIT\tKEY\tOVERRIDE\tUNTIL\tREASON\tBY\n")
	for _, o := range l.Overrides {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Limit, strconv.Quote(o.Key), o.What(), o.Until(), o.Reason, o.By)
	}
	tw.Flush()
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
