package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/internal/adminjson"
)

// banState is one ban of GET /admin/bans: the rule, limit and values of
// the key (masked unless keys are shown; sluice keys inspect and reset
// take them as they are), and how long it stays banned.
type banState struct {
	Rule        string   `json:"rule"`
	Limit       string   `json:"limit"`
	Values      []string `json:"values"`
	Key         string   `json:"key"` // as the status page shows it
	BannedForMs int64    `json:"banned_for_ms"`
}

// listBans serves GET /admin/bans: the bans running now, soonest ending
// first, from the index every instance on the store writes.
func (s *admin) listBans(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	now := time.Now()
	es, err := s.cfg.Bans.List(ctx, now)
	if err != nil {
		adminjson.Error(w, http.StatusServiceUnavailable, "the store did not answer: "+err.Error())
		return
	}
	out := make([]banState, 0, len(es))
	for _, e := range es {
		parts, ok := decide.KeyParts(e.Key)
		if !ok || len(parts) < 3 {
			continue // not a key a policy limit built
		}
		b := banState{Rule: parts[0], Limit: parts[1], Key: s.cfg.Keys.Key(e.Key), BannedForMs: e.Until.Sub(now).Milliseconds()}
		for _, v := range parts[2:] {
			b.Values = append(b.Values, decide.ShowValue(v, s.cfg.Keys.Show))
		}
		out = append(out, b)
	}
	adminjson.Write(w, map[string]any{"bans": out})
}
