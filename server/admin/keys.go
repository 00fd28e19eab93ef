package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/adminjson"
)

// maxKeyForm bounds the form of a key operation (the values of a key's
// parts, each digested by the key builder if long).
const maxKeyForm = 16 << 10

// keyState is the answer of GET /admin/keys and POST /admin/keys/reset:
// one key's state under one limit of the policy, as a request of cost 1
// would find it now.
type keyState struct {
	Rule         string   `json:"rule"`
	Limit        string   `json:"limit"`
	Values       []string `json:"values"`
	Spec         string   `json:"spec"` // the limit, as sluice.Limit.String writes it
	Remaining    int64    `json:"remaining"`
	Allowed      bool     `json:"allowed"` // whether a request of cost 1 would be admitted now
	RetryAfterMs int64    `json:"retry_after_ms"`
	ResetAfterMs int64    `json:"reset_after_ms"`
	Degraded     bool     `json:"degraded,omitempty"`
	Reset        bool     `json:"reset,omitempty"` // the state was just forgotten
	// Ban is the limit's ban (its ban:), BannedForMs how long the key
	// stays banned (0: not banned). A reset lifts the ban.
	Ban         string `json:"ban,omitempty"`
	BannedForMs int64  `json:"banned_for_ms,omitempty"`

	ban time.Duration
}

// keyOperation reads the rule, limit and values of a key operation and
// finds them in the current policy: the store request naming the key (its
// key, its slot, which is its rule's, and its limit; cost 0), or the
// status and message of the caller's error.
func (s *admin) keyOperation(w http.ResponseWriter, r *http.Request) (ks keyState, key sluice.Request, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	if err := r.ParseForm(); err != nil {
		adminjson.Error(w, http.StatusBadRequest, "unreadable form: "+err.Error())
		return ks, key, false
	}
	ks = keyState{Rule: r.Form.Get("rule"), Limit: r.Form.Get("limit"), Values: r.Form["value"]}
	if ks.Rule == "" || ks.Limit == "" || len(ks.Values) == 0 {
		adminjson.Error(w, http.StatusBadRequest, "want rule, limit and value (one value per part of the limit's key, in order; * for global)")
		return ks, key, false
	}
	ru, l := findLimit(s.cfg.Policy(), ks.Rule, ks.Limit)
	if l == nil {
		adminjson.Error(w, http.StatusNotFound, "the policy has no limit "+ks.Limit+" in rule "+ks.Rule)
		return ks, key, false
	}
	k, err := l.StoreKey(ks.Rule, ks.Values)
	if err != nil {
		adminjson.Error(w, http.StatusBadRequest, err.Error())
		return ks, key, false
	}
	ks.Spec = l.Limit.String()
	if ks.ban = l.Ban(); ks.ban > 0 {
		ks.Ban = sluice.FormatDuration(ks.ban)
	}
	return ks, sluice.Request{Key: k, Slot: ru.Slot(), Limit: l.Limit}, true
}

// findLimit returns the limit of p named limit in the rule named rule, and
// the rule, or nils.
func findLimit(p *policy.Policy, rule, limit string) (*policy.Rule, *policy.Limit) {
	if p == nil {
		return nil, nil
	}
	for _, ru := range p.Rules {
		if ru.Name != rule {
			continue
		}
		for _, l := range ru.Limits {
			if l.Name == limit {
				return ru, l
			}
		}
	}
	return nil, nil
}

// inspectKey serves GET /admin/keys: a key's state, read without charging
// it (a request of cost 0).
func (s *admin) inspectKey(w http.ResponseWriter, r *http.Request) {
	ks, key, ok := s.keyOperation(w, r)
	if ok {
		s.answerKey(w, r.Context(), ks, key)
	}
}

// resetKey serves POST /admin/keys/reset: the key's state is forgotten,
// then reported as inspectKey does.
func (s *admin) resetKey(w http.ResponseWriter, r *http.Request) {
	ks, key, ok := s.keyOperation(w, r)
	if !ok {
		return
	}
	rs, can := s.cfg.Store.Store.(sluice.Resetter)
	if !can {
		adminjson.Error(w, http.StatusNotImplemented, "the store cannot reset a key")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := rs.Reset(ctx, key); err != nil {
		adminjson.Error(w, http.StatusServiceUnavailable, "reset failed, the state may remain: "+err.Error())
		return
	}
	if ks.ban > 0 {
		if err := rs.Reset(ctx, sluice.Request{Key: policy.BanKey(ks.Rule, key.Key), Slot: key.Slot, Limit: decide.BanLimit(ks.ban)}); err != nil {
			adminjson.Error(w, http.StatusServiceUnavailable, "the key's usage was reset, but its ban may remain: "+err.Error())
			return
		}
		if s.cfg.Bans != nil {
			s.cfg.Bans.Lift(ctx, key.Key) // the ban is lifted; only the listing would be stale
		}
	}
	s.cfg.Logger.Info("admin: key reset", "rule", ks.Rule, "limit", ks.Limit, "values", len(ks.Values))
	ks.Reset = true
	s.answerKey(w, ctx, ks, key)
}

// answerKey peeks at key (a request of cost 0) and writes ks with what it
// found.
func (s *admin) answerKey(w http.ResponseWriter, ctx context.Context, ks keyState, key sluice.Request) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := s.cfg.Store.Store.Take(ctx, key)
	if err != nil {
		adminjson.Error(w, http.StatusServiceUnavailable, "the store did not answer: "+err.Error())
		return
	}
	ks.Remaining, ks.Allowed, ks.Degraded = d.Remaining, d.Allowed, d.Degraded
	ks.RetryAfterMs, ks.ResetAfterMs = d.RetryAfter.Milliseconds(), d.ResetAfter.Milliseconds()
	if ks.ban > 0 {
		b, err := s.cfg.Store.Store.Take(ctx, sluice.Request{Key: policy.BanKey(ks.Rule, key.Key), Slot: key.Slot, Limit: decide.BanLimit(ks.ban)})
		if err != nil {
			adminjson.Error(w, http.StatusServiceUnavailable, "the store did not answer about the key's ban: "+err.Error())
			return
		}
		if b.Remaining < 1 {
			ks.BannedForMs = b.RetryAfter.Milliseconds()
			ks.Allowed = false
			ks.RetryAfterMs = max(ks.RetryAfterMs, ks.BannedForMs)
		}
	}
	adminjson.Write(w, ks)
}
