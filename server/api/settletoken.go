package api

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
)

// A settle token is what /v1/check gives for a decision that reserved a
// cost, and what /v1/settle takes back with the actual cost. It carries
// everything the settle needs (each check's name, key, limit, reservation
// and bounds), so the server holds nothing per token until it is spent:
//
//	base64url( payload | HMAC-SHA256(secret, payload) )
//	payload = version, id, expiry, then per check: name, key, limit,
//	          reserved, max, missing, missing cost, explicit[, override[, slot[, llm]]]
//	llm     = 0 | 1, model, prompt bytes, max output
//
// A token is of the lowest version that holds it, so that an instance of
// an earlier sluice reads it during a rollout: version 5 when a check of
// it counts LLM tokens (the request it reserved for, llmusage.Request,
// follows each check: the model a settle prices, fixed at the check, so
// that a settle cannot name a cheaper one), else 4 when a check of it
// has a Slot (decide.Check.Slot, a rule with one_slot: the override's
// name and the slot follow each check), else 3 when a check had an
// override of its policy limit (its name follows each check), else 2.
// Tokens of version 1 (the sluice before) are read too: their limits
// have no calendar, zone or version.
//
// The MAC makes it unforgeable by anyone without the secret (a random one
// per process, or settle_secret_file); the expiry bounds its life; the id
// (32 random bits per process, then a counter) makes it single-use: spent
// ids are remembered until their expiry, one bit each, in a bounded set,
// and with a shared secret also in the store (markSpent), which every
// instance sees.
const (
	tokenVersion   = 5 // 4: no LLM requests; 3: no slots either; 2: no overrides either; 1: limits without Calendar, Zone and Version; all still read
	tokenMACSize   = sha256.Size
	maxTokenLen    = 48 << 10 // encoded
	maxSpentWords  = 1 << 16  // 4,194,304 tokens spent within their lifetime
	defaultSettleT = 5 * time.Minute
)

// Errors of a token that cannot be settled, each its own status.
var (
	errTokenMalformed = errors.New("token: not a settle token /v1/check issued")
	errTokenForged    = errors.New("token: not issued by this server (or altered)")
	errTokenExpired   = errors.New("token: expired")
	errTokenSpent     = errors.New("token: already settled")
	errTokensFull     = errors.New("token: too many tokens settled within their lifetime; try again later")
	errSpentUnknown   = errors.New("token: the store could not say whether it was settled; try again")
)

// settleEntry is one check a token settles.
type settleEntry struct {
	name, key string
	limit     sluice.Limit
	reserved  int64
	late      decide.LateCost
	explicit  bool              // an explicit check of the API: its name is the caller's
	override  string            // decide.Check.Override
	slot      string            // decide.Check.Slot
	llm       *llmusage.Request // decide.Check.LLM: the check counts LLM tokens
}

// versionFor is the lowest token version that holds entries.
func versionFor(entries []settleEntry) byte {
	version := byte(2)
	for _, e := range entries {
		switch {
		case e.llm != nil:
			return 5
		case e.slot != "":
			return 4
		case e.override != "":
			version = 3
		}
	}
	return version
}

// settleTokens issues and redeems settle tokens. It is safe for concurrent
// use.
type settleTokens struct {
	secret []byte
	shared bool // the secret is configured: other instances issue tokens too
	ttl    time.Duration
	base   uint64 // random high 32 bits of this process's ids
	next   atomic.Uint64
	now    func() time.Time

	mu    sync.Mutex
	spent map[uint64]spentWord // by id/64
}

// spentWord marks the spent ids of 64 consecutive ids, and when the last
// of them expires.
type spentWord struct {
	bits   uint64
	expiry int64 // Unix ms
}

// newSettleTokens returns the tokens of one process: signed with the
// secret in secretFile, or with a random one when it is "".
func newSettleTokens(ttl time.Duration, secretFile string) (*settleTokens, error) {
	if ttl <= 0 {
		ttl = defaultSettleT
	}
	var id [8]byte
	rand.Read(id[:]) // never fails (crypto/rand panics rather)
	st := &settleTokens{ttl: ttl, base: binary.LittleEndian.Uint64(id[:]) &^ (1<<32 - 1), now: time.Now, spent: map[uint64]spentWord{}}
	if secretFile == "" {
		st.secret = make([]byte, 32)
		rand.Read(st.secret)
		return st, nil
	}
	secret, err := readSecret(secretFile)
	if err != nil {
		return nil, fmt.Errorf("settle_secret_file: %w", err)
	}
	st.secret, st.shared = secret, true
	return st, nil
}

// readSecret reads a secret file: at least 32 bytes once surrounding
// white space is trimmed, at most 4 KiB.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<10+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 || len(b) > 4<<10 {
		return nil, fmt.Errorf("%s: %d bytes; want 32 to 4096 (for example: head -c 48 /dev/urandom | base64 > %s)", path, len(b), path)
	}
	return b, nil
}

// issue returns a token for entries.
func (st *settleTokens) issue(entries []settleEntry) string {
	version := versionFor(entries)
	b := []byte{version}
	b = binary.AppendUvarint(b, st.base|st.next.Add(1)&(1<<32-1))
	b = binary.AppendVarint(b, st.now().Add(st.ttl).UnixMilli())
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = appendString(b, e.name)
		b = appendString(b, e.key)
		b = appendLimit(b, e.limit)
		for _, v := range []int64{e.reserved, e.late.Max, int64(e.late.Missing), e.late.MissingCost} {
			b = binary.AppendVarint(b, v)
		}
		explicit := uint64(0)
		if e.explicit {
			explicit = 1
		}
		b = binary.AppendUvarint(b, explicit)
		if version >= 3 {
			b = appendString(b, e.override)
		}
		if version >= 4 {
			b = appendString(b, e.slot)
		}
		if version >= 5 {
			b = appendLLM(b, e.llm)
		}
	}
	mac := hmac.New(sha256.New, st.secret)
	mac.Write(b)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(b))
}

// redeem checks token and spends it: it returns the entries to settle, or
// an error saying why not (and nothing is spent). unspend gives the token
// back when nothing of it could be settled.
func (st *settleTokens) redeem(token string) (entries []settleEntry, id uint64, err error) {
	if len(token) > maxTokenLen {
		return nil, 0, errTokenMalformed
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < tokenMACSize+1 {
		return nil, 0, errTokenMalformed
	}
	payload, sum := raw[:len(raw)-tokenMACSize], raw[len(raw)-tokenMACSize:]
	mac := hmac.New(sha256.New, st.secret)
	mac.Write(payload)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, 0, errTokenForged
	}
	id, expiry, entries, err := parseToken(payload)
	if err != nil {
		return nil, 0, err // a token this server signed but cannot read: a newer version
	}
	if st.now().UnixMilli() >= expiry {
		return nil, 0, errTokenExpired
	}
	return entries, id, st.spend(id, expiry)
}

// spend marks id spent, or reports that it was.
func (st *settleTokens) spend(id uint64, expiry int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	w, bit := st.spent[id/64], uint64(1)<<(id%64)
	if w.bits&bit != 0 {
		return errTokenSpent
	}
	if w.bits == 0 && len(st.spent) >= maxSpentWords {
		st.prune()
		if len(st.spent) >= maxSpentWords {
			return errTokensFull
		}
	}
	w.bits |= bit
	w.expiry = max(w.expiry, expiry)
	st.spent[id/64] = w
	return nil
}

// unspend gives back a token none of whose entries was settled.
func (st *settleTokens) unspend(id uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	w := st.spent[id/64]
	w.bits &^= uint64(1) << (id % 64)
	st.spent[id/64] = w
}

// prune forgets the words all of whose spent tokens have expired: a token
// past its expiry is refused as expired anyway.
func (st *settleTokens) prune() {
	now := st.now().UnixMilli()
	for k, w := range st.spent {
		if w.expiry <= now {
			delete(st.spent, k)
		}
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendLLM encodes the LLM request a check reserved for: 0 for none.
func appendLLM(b []byte, r *llmusage.Request) []byte {
	if r == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, 1)
	b = appendString(b, r.Model)
	b = binary.AppendVarint(b, r.PromptBytes)
	return binary.AppendVarint(b, r.MaxOutput)
}

// appendLimit encodes every field of a sluice.Limit (TestTokenLimitFields
// fails when Limit gains one this does not encode).
func appendLimit(b []byte, l sluice.Limit) []byte {
	b = binary.AppendUvarint(b, uint64(l.Algorithm))
	for _, v := range []int64{l.Count, int64(l.Period), l.Burst, l.NoDelay, int64(l.Warmup), int64(l.LeaseTTL)} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(l.Calendar))
	b = appendString(b, l.Zone)
	return binary.AppendUvarint(b, uint64(l.Version))
}

// tokenReader reads a token's payload, remembering the first error.
type tokenReader struct {
	b       []byte
	err     error
	version byte // the token's format
}

func (r *tokenReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *tokenReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one number with read (binary.Uvarint or
// binary.Varint), remembering errTokenMalformed when there is none.
func readVarint[T uint64 | int64](r *tokenReader, read func([]byte) (T, int)) T {
	v, n := read(r.b)
	if n <= 0 {
		r.err, r.b = errTokenMalformed, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *tokenReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err, r.b = errTokenMalformed, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *tokenReader) limit() sluice.Limit {
	l := sluice.Limit{Algorithm: sluice.Algorithm(r.uvarint())}
	l.Count, l.Period, l.Burst = r.varint(), time.Duration(r.varint()), r.varint()
	l.NoDelay, l.Warmup, l.LeaseTTL = r.varint(), time.Duration(r.varint()), time.Duration(r.varint())
	if r.version >= 2 {
		l.Calendar, l.Zone = sluice.Calendar(min(r.uvarint(), 255)), r.string()
		l.Version = uint32(min(r.uvarint(), 1<<32-1))
	}
	return l
}

// parseToken reads a verified payload.
func parseToken(payload []byte) (id uint64, expiry int64, entries []settleEntry, err error) {
	if payload[0] < 1 || payload[0] > tokenVersion {
		return 0, 0, nil, fmt.Errorf("%w (version %d)", errTokenMalformed, payload[0])
	}
	r := &tokenReader{b: payload[1:], version: payload[0]}
	id, expiry = r.uvarint(), r.varint()
	n := r.uvarint()
	if n == 0 || n > uint64(len(r.b)) { // every entry takes bytes
		return 0, 0, nil, errTokenMalformed
	}
	for range n {
		e := settleEntry{name: r.string(), key: r.string(), limit: r.limit(), reserved: r.varint()}
		e.late.Max, e.late.Missing, e.late.MissingCost = r.varint(), decide.Missing(r.varint()), r.varint()
		e.explicit = r.uvarint() == 1
		if r.version >= 3 {
			e.override = r.string()
		}
		if r.version >= 4 {
			e.slot = r.string()
		}
		if r.version >= 5 && r.uvarint() == 1 {
			e.llm = &llmusage.Request{Model: r.string(), PromptBytes: r.varint(), MaxOutput: r.varint()}
		}
		entries = append(entries, e)
	}
	if r.err != nil || len(r.b) != 0 {
		return 0, 0, nil, errTokenMalformed
	}
	return id, expiry, entries, nil
}
