package overrides

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/internal/adminjson"
)

// Handler serves the admin API of the overrides:
//
//	PUT    /admin/overrides/{limit}/{key}  {"scale": N} | {"unlimited": true} | {"limit": {...}}, with "ttl" and "reason"
//	GET    /admin/overrides                every override, {"overrides": [...]}
//	DELETE /admin/overrides/{limit}/{key}
//
// {key} is the key's value as the limit keys it: a header's value, an
// address (in any form: ::ffff:192.0.2.1 is 192.0.2.1), the values of a
// key of several parts joined by "+". The admin listener's authentication
// applies in front of it.
func (s *Service) Handler() http.Handler {
	h := handler{s}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/overrides", h.list)
	mux.HandleFunc("PUT /admin/overrides/{limit}/{key...}", h.put)
	mux.HandleFunc("DELETE /admin/overrides/{limit}/{key...}", h.delete)
	return mux
}

// handler serves the admin API of a Service's overrides.
type handler struct{ *Service }

// putBody is the body of a PUT.
type putBody struct {
	Scale     *float64        `json:"scale"`
	Unlimited *bool           `json:"unlimited"`
	Limit     json.RawMessage `json:"limit"`
	TTL       string          `json:"ttl"`
	Reason    string          `json:"reason"`
}

// maxReason bounds an override's reason.
const maxReason = 500

// put serves PUT /admin/overrides/{limit}/{key}.
func (s handler) put(w http.ResponseWriter, r *http.Request) {
	e, l, status, err := s.entry(w, r)
	if err != nil {
		adminjson.Error(w, status, err.Error())
		return
	}
	o, err := e.override()
	if err == nil {
		_, err = o.Apply(l.base)
	}
	if err != nil {
		adminjson.Error(w, http.StatusBadRequest, "the override does not apply to limit "+e.Limit+": "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	switch err := s.cfg.Keeper.Put(ctx, e); {
	case errors.Is(err, ErrFull):
		adminjson.Error(w, http.StatusConflict, fmt.Sprintf("%d overrides are kept already, the most there may be: delete some (GET /admin/overrides lists them)", MaxOverrides))
		return
	case err != nil:
		adminjson.Error(w, http.StatusServiceUnavailable, "the store did not keep the override: "+err.Error())
		return
	}
	s.logChange("set", e, e.By)
	if err := s.reload(ctx); err != nil {
		s.storeError(err) // the next poll applies it
	}
	adminjson.Write(w, e)
}

// entry reads the override a PUT asks for: its limit in the policy in
// force, its key as the limit keys it, what it does, its expiry. status
// and err say what is wrong with the request.
func (s handler) entry(w http.ResponseWriter, r *http.Request) (e Entry, l *limitRef, status int, err error) {
	l, key, err := s.target(r, true)
	if err != nil {
		return e, nil, http.StatusNotFound, err
	}
	if key == "" {
		return e, nil, http.StatusBadRequest, errors.New(keyProblem(r.PathValue("key")))
	}
	var b putBody
	if err := decodeBody(w, r, &b); err != nil {
		return e, nil, http.StatusBadRequest, err
	}
	e = Entry{Limit: l.name, Key: key, Reason: b.Reason, By: caller(r), SetAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := what(&e, b); err != nil {
		return e, nil, http.StatusBadRequest, err
	}
	if len(b.Reason) > maxReason {
		return e, nil, http.StatusBadRequest, fmt.Errorf("reason: %d bytes, longer than %d", len(b.Reason), maxReason)
	}
	if b.TTL != "" {
		ttl, err := time.ParseDuration(b.TTL)
		if err != nil || ttl <= 0 || ttl > MaxTTL {
			return e, nil, http.StatusBadRequest, fmt.Errorf("ttl: %.40q: want a duration above 0 and at most %s, such as 15m or 24h (none: the override stays until deleted)", b.TTL, MaxTTL)
		}
		e.ExpiresAt = e.SetAt.Add(ttl)
	}
	return e, l, 0, nil
}

// what sets what e does from b: exactly one of scale, unlimited, limit.
func what(e *Entry, b putBody) error {
	n := 0
	if b.Scale != nil {
		n++
		e.Scale = *b.Scale
		if !(e.Scale > 0) {
			return fmt.Errorf("scale: %g: want a number above 0 (10 for ten times the limit, 0.5 for half)", e.Scale)
		}
	}
	if b.Unlimited != nil {
		n++
		if !*b.Unlimited {
			return errors.New(`unlimited: only true is meaningful (DELETE the override to restore the limit)`)
		}
		e.Unlimited = true
	}
	if len(b.Limit) > 0 && !bytes.Equal(b.Limit, []byte("null")) {
		n++
		e.Spec = b.Limit
	}
	if n != 1 {
		return errors.New(`give one of "scale" (a number), "unlimited": true or "limit" (an object such as {"algorithm": "fixed_window", "rate": "100/h"})`)
	}
	return nil
}

// decodeBody reads one JSON object of at most MaxEntryBytes into v,
// refusing unknown fields.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxEntryBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return fmt.Errorf("the body is longer than %d bytes", MaxEntryBytes)
		}
		return fmt.Errorf("the body is not the JSON of an override: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("the body holds more than one JSON value")
	}
	return nil
}

// limitRef is a limit an override can name: its name, and the limit its
// overrides apply to.
type limitRef struct {
	name string
	base sluice.Limit
}

// target reads {limit} and {key}: the limit in the policy in force, or
// else the one Config.Named finds (nil and an error when neither has it,
// unless mustExist is false: then the key is bounded as planning bounds
// values), and the key as the limit keys it ("" when it cannot be one).
func (s handler) target(r *http.Request, mustExist bool) (*limitRef, string, error) {
	name, raw := r.PathValue("limit"), r.PathValue("key")
	bad := raw == "" || len(raw) > MaxKeyBytes
	p := s.cfg.Policy()
	if p != nil {
		if _, l := p.FindLimit(name); l != nil {
			if bad {
				return &limitRef{l.Name, l.Limit}, "", nil
			}
			key, err := p.KeyValue(l, raw)
			if err != nil {
				key = ""
			}
			return &limitRef{l.Name, l.Limit}, key, nil
		}
	}
	var ref *limitRef
	if s.cfg.Named != nil {
		if lim, ok := s.cfg.Named(name); ok {
			ref = &limitRef{name, lim}
		}
	}
	if ref == nil && mustExist {
		return nil, "", fmt.Errorf("the policy has no limit %.100q", name)
	}
	if bad {
		return ref, "", nil
	}
	return ref, decide.KeyValue(raw), nil
}

// keyProblem says why raw is not a key.
func keyProblem(raw string) string {
	if len(raw) > MaxKeyBytes {
		return fmt.Sprintf("the key is %d bytes, longer than %d", len(raw), MaxKeyBytes)
	}
	return fmt.Sprintf("the key %.60q is not a value the limit's key can take (empty, or the wrong number of parts, or not an address for an ip key)", raw)
}

// delete serves DELETE /admin/overrides/{limit}/{key}. An override of a
// limit the policy no longer has can be deleted too.
func (s handler) delete(w http.ResponseWriter, r *http.Request) {
	l, key, _ := s.target(r, false)
	if key == "" {
		adminjson.Error(w, http.StatusBadRequest, keyProblem(r.PathValue("key")))
		return
	}
	name := r.PathValue("limit")
	if l != nil {
		name = l.name
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	found, err := s.cfg.Keeper.Delete(ctx, name, key)
	switch {
	case err != nil:
		adminjson.Error(w, http.StatusServiceUnavailable, "the store did not delete the override: "+err.Error())
		return
	case !found:
		adminjson.Error(w, http.StatusNotFound, fmt.Sprintf("no override of limit %.100q for that key (GET /admin/overrides lists them)", name))
		return
	}
	e := Entry{Limit: name, Key: key}
	s.logChange("delete", e, caller(r))
	if err := s.reload(ctx); err != nil {
		s.storeError(err)
	}
	adminjson.Write(w, map[string]any{"deleted": e})
}

// list serves GET /admin/overrides: every override kept and not expired,
// by limit and key, read from the store.
func (s handler) list(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	entries, _, err := s.cfg.Keeper.Load(ctx)
	if err != nil {
		adminjson.Error(w, http.StatusServiceUnavailable, "the store did not answer: "+err.Error())
		return
	}
	now := time.Now()
	entries = slices.DeleteFunc(entries, func(e Entry) bool { return e.expired(now) })
	slices.SortFunc(entries, func(a, b Entry) int {
		return strings.Compare(a.Limit+"\x00"+a.Key, b.Limit+"\x00"+b.Key)
	})
	adminjson.Write(w, map[string]any{"overrides": entries})
}

// caller says who sent r: its address, and the digest of its bearer token
// or the subject of its client certificate.
func caller(r *http.Request) string {
	who := r.RemoteAddr
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		who += " token sha256:" + hex.EncodeToString(sum[:4])
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		who += " cert " + r.TLS.PeerCertificates[0].Subject.String()
	}
	return who
}
