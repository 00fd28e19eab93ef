package api

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
)

// TestTokenLimitFields: a token carries every field of a sluice.Limit, so
// a settle charges the limit the check charged. A field added to Limit
// fails this test until appendLimit and tokenReader.limit carry it.
func TestTokenLimitFields(t *testing.T) {
	if n := reflect.TypeOf(sluice.Limit{}).NumField(); n != 10 {
		t.Fatalf("sluice.Limit has %d fields; the settle token encodes 10", n)
	}
	st := mustTokens(t)
	in := []settleEntry{
		{name: "a", key: "k\x00ey", limit: sluice.Limit{Algorithm: 3, Count: 1, Period: 2, Burst: 3, NoDelay: 4, Warmup: 5, LeaseTTL: 6},
			reserved: 7, late: decide.LateCost{Max: 8, Missing: decide.MissingFixed, MissingCost: 9}},
		{name: "b", key: "", limit: sluice.TokenBucket(sluice.PerMinute(10000), 10000), reserved: 0, late: decide.LateCost{Max: 1 << 50}, explicit: true},
		{name: "c", key: "k", limit: sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Count: 5, Calendar: sluice.Month, Zone: "Europe/Paris", Version: 1<<32 - 1},
			reserved: 1},
	}
	for _, c := range []struct {
		override, slot string
		llm            *llmusage.Request
		version        byte
	}{{"", "", nil, 2}, {"key=acme", "", nil, 3}, {"", "6:orders", nil, 4}, {"key=acme", "6:orders", nil, 4},
		{"", "", &llmusage.Request{Model: "gpt-4o", PromptBytes: 12000, MaxOutput: 500}, 5}, {"key=acme", "6:orders", &llmusage.Request{}, 5}} {
		in[2].override, in[2].slot, in[0].llm = c.override, c.slot, c.llm
		token := st.issue(in)
		out, _, err := st.redeem(token)
		if err != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip: %v\n in %+v\nout %+v", err, in, out)
		}
		// Without an override or a slot the token stays of version 2,
		// without a slot of version 3, which earlier sluices read during
		// a rollout.
		raw, _ := base64.RawURLEncoding.DecodeString(token)
		if raw[0] != c.version {
			t.Errorf("override %q, slot %q: version %d, want %d", c.override, c.slot, raw[0], c.version)
		}
	}
}

// TestSpentBounded: the spent set holds at most maxSpentWords words; when
// they are all live, a settle is refused (503, nothing refunded) rather
// than the set grown or a token forgotten; once they expire, settles go on.
func TestSpentBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := mustTokens(t)
	st.now = func() time.Time { return now }
	live := now.Add(30 * time.Second).UnixMilli() // earlier tokens' expiry
	for i := range uint64(maxSpentWords) {
		st.spent[i+1_000_000] = spentWord{bits: 1, expiry: live}
	}
	token := st.issue([]settleEntry{{name: "a", key: "k", limit: sluice.FixedWindow(10, time.Hour), reserved: 1}})
	if _, _, err := st.redeem(token); !errors.Is(err, errTokensFull) {
		t.Fatalf("with the set full: %v, want errTokensFull", err)
	}
	if len(st.spent) != maxSpentWords {
		t.Fatalf("the set grew to %d words", len(st.spent))
	}
	now = now.Add(45 * time.Second) // every word has expired; the token has not
	if _, _, err := st.redeem(token); err != nil {
		t.Fatalf("after the words expired: %v", err)
	}
	if len(st.spent) != 1 {
		t.Errorf("%d words left, want 1", len(st.spent))
	}
	if _, _, err := st.redeem(token); !errors.Is(err, errTokenSpent) {
		t.Errorf("a replay: %v, want errTokenSpent", err)
	}
}

func mustTokens(t *testing.T) *settleTokens {
	st, err := newSettleTokens(time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// BenchmarkSettleToken is what a token costs the decision API: issuing it
// with /v1/check, and checking and spending it with /v1/settle.
func BenchmarkSettleToken(b *testing.B) {
	st, _ := newSettleTokens(time.Minute, "")
	entries := []settleEntry{{name: "tokens", key: "7:llm6:tokens5:alice", limit: sluice.TokenBucket(sluice.PerMinute(10000), 10000),
		reserved: 500, late: decide.LateCost{Max: 50000}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := st.redeem(st.issue(entries)); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzSettleToken: whatever a caller sends as a token, redeem answers with
// an error or with the entries of a token this server issued, never a
// panic; and parseToken, which reads only payloads the MAC vouches for,
// never panics on any payload either.
func FuzzSettleToken(f *testing.F) {
	st, _ := newSettleTokens(time.Minute, "")
	valid := st.issue([]settleEntry{{name: "a", key: "k", limit: sluice.FixedWindow(10, time.Hour), reserved: 1, late: decide.LateCost{Max: 5}}})
	f.Add(valid, []byte{tokenVersion, 1, 2, 1, 1, 'a'})
	f.Add("", []byte{})
	f.Add("AAAA", []byte{tokenVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, token string, payload []byte) {
		if entries, _, err := st.redeem(token); err == nil && token != valid {
			t.Fatalf("a token this server did not issue was redeemed: %q → %+v", token, entries)
		}
		if len(payload) > 0 {
			parseToken(payload)
		}
	})
}

// TestTokenVersion1: a token an earlier sluice issued (format 1, limits
// without calendar, zone and version) is still read, during a rollout.
func TestTokenVersion1(t *testing.T) {
	l := sluice.FixedWindow(10, time.Hour)
	b := []byte{1}
	b = binary.AppendUvarint(b, 7)
	b = binary.AppendVarint(b, 1_700_000_000_000)
	b = binary.AppendUvarint(b, 1)
	b = appendString(appendString(b, "a"), "k")
	b = binary.AppendUvarint(b, uint64(l.Algorithm))
	for _, v := range []int64{l.Count, int64(l.Period), 0, 0, 0, 0, 3, 0, 0, 0} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, 1) // explicit
	id, _, es, err := parseToken(b)
	if err != nil || id != 7 || len(es) != 1 || es[0].limit != l || es[0].reserved != 3 || !es[0].explicit {
		t.Fatalf("a version 1 token: id %d, %+v, %v; want id 7, %s reserving 3", id, es, err, l)
	}
}
