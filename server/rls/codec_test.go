package rls

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randText is a short string, sometimes empty, sometimes not ASCII.
func randText(r *rand.Rand) string {
	const alphabet = "ab_/=*.é😀"
	runes := []rune(alphabet)
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// randRequest is a request using every field of the protocol, in random
// amounts (within the service's bounds when within is set).
func randRequest(r *rand.Rand, within bool) *rlspb.RateLimitRequest {
	maxD, maxE := MaxDescriptors+3, MaxEntries+3
	if within {
		maxD, maxE = MaxDescriptors, MaxEntries
	}
	req := &rlspb.RateLimitRequest{Domain: randText(r), HitsAddend: r.Uint32() >> r.IntN(33)}
	for range r.IntN(min(maxD, 3+r.IntN(maxD))) {
		d := &commonpb.RateLimitDescriptor{IsNegativeHits: r.IntN(8) == 0}
		for range r.IntN(min(maxE, 2+r.IntN(maxE))) {
			d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: randText(r), Value: randText(r)})
		}
		if r.IntN(3) == 0 {
			d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: r.Uint32() >> r.IntN(33), Unit: typepb.RateLimitUnit(r.IntN(9) - 1)}
			if r.IntN(2) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(r.Uint32() >> r.IntN(33))
			}
		}
		if r.IntN(3) == 0 {
			d.HitsAddend = wrapperspb.UInt64(r.Uint64() >> r.IntN(65))
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// decodeWire decodes b with the codec.
func decodeWire(b []byte) (*wireRequest, error) {
	w := new(wireRequest)
	err := codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, w)
	if err != nil {
		panic(err) // the codec reports a malformed request in w.err
	}
	return w, w.err
}

// checkDecode decodes b with the codec and with proto.Unmarshal (unknown
// fields discarded, as the codec skips them) and fails unless both refuse
// it or both decode the same request. The codec may also refuse a request
// beyond the bounds that proto.Unmarshal decodes.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var want rlspb.RateLimitRequest
	wantErr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &want)
	got, err := decodeWire(b)
	switch {
	case err != nil && wantErr == nil:
		if validate(&want, &defaultBounds) == nil || !strings.Contains(err.Error(), "more than") {
			t.Fatalf("codec refuses %x (%v), proto.Unmarshal decodes it", b, err)
		}
	case err == nil && wantErr != nil:
		t.Fatalf("codec decodes %x, proto.Unmarshal refuses it: %v", b, wantErr)
	case err == nil && !proto.Equal(&got.RateLimitRequest, &want):
		t.Fatalf("codec decodes %x as\n%v\nproto.Unmarshal as\n%v", b, &got.RateLimitRequest, &want)
	}
}

// appendUnknown appends fields that the request messages do not have, and
// known field numbers with the wrong wire type, which proto.Unmarshal
// keeps as unknown fields.
func appendUnknown(r *rand.Rand, b []byte) []byte {
	for range r.IntN(3) {
		num := protowire.Number(1 + r.IntN(20))
		switch r.IntN(5) {
		case 0:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), r.Uint64())
		case 1:
			b = protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), r.Uint32())
		case 2:
			b = protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), r.Uint64())
		case 3:
			b = protowire.AppendTag(b, num, protowire.StartGroupType)
			b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 7)
			b = protowire.AppendTag(b, num, protowire.EndGroupType)
		default:
			if num <= 4 { // a known number as bytes would be decoded
				num += 20
			}
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(randText(r)))
		}
	}
	return b
}

func TestCodecDecodesAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		req := randRequest(r, r.IntN(4) > 0)
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, b)
		// The same fields again (a repeated field grows, the last scalar
		// wins, singular messages merge), with unknown fields between.
		b2, _ := proto.Marshal(randRequest(r, true))
		checkDecode(t, appendUnknown(r, append(appendUnknown(r, b), b2...)))
		// Truncated, and with a byte changed.
		if len(b) > 0 {
			checkDecode(t, b[:r.IntN(len(b))])
			c := bytes.Clone(b)
			c[r.IntN(len(c))] = byte(r.Uint32())
			checkDecode(t, c)
		}
	}
}

func TestCodecRefuses(t *testing.T) {
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"a truncated varint", []byte{0x18, 0x80}, "malformed"},
		{"a length past the end", []byte{0x0a, 0x05, 'a'}, "malformed"},
		{"field number 0", []byte{0x00, 0x01}, "malformed"},
		{"a stray end of group", []byte{0x0c}, "malformed"},
		{"an unterminated group", []byte{0x2b, 0x08, 0x01}, "malformed"},
		{"wire type 6", []byte{0x0e}, "malformed"},
		{"a domain of invalid UTF-8", []byte{0x0a, 0x02, 0xff, 0xfe}, "UTF-8"},
		{"a value of invalid UTF-8", []byte{0x12, 0x06, 0x0a, 0x04, 0x12, 0x02, 0xff, 0xfe}, "UTF-8"},
		{"65 descriptors", bytes.Repeat([]byte{0x12, 0x00}, MaxDescriptors+1), "the request has 65 descriptors, more than 64"},
		{"17 entries", append([]byte{0x12, byte(len(entry) * (MaxEntries + 1))}, bytes.Repeat(entry, MaxEntries+1)...), "descriptor 0 has 17 entries, more than 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeWire(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decoding %x: %v, want an error saying %q", tc.b, err, tc.want)
			}
		})
	}
}

// A request beyond the bounds is refused having decoded no more than
// MaxDescriptors descriptors: decoding a megabyte of empty descriptors
// allocates the one copy of the message and a few kilobytes.
func TestCodecBoundsMemory(t *testing.T) {
	b := bytes.Repeat([]byte{0x12, 0x00}, 1<<19)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodeWire(b)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "524288 descriptors, more than 64") {
		t.Fatalf("decoding 512k descriptors: %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(b))+32<<10 {
		t.Errorf("refusing a message of %d bytes allocated %d bytes, want at most 32 KiB more", len(b), n)
	}
}

// The usual request, one descriptor of a few entries, costs one
// allocation beyond its wireRequest: the copy of its strings.
func TestCodecDecodeAllocs(t *testing.T) {
	b, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{
		{Key: "remote_address", Value: "10.0.0.1"}, {Key: "path", Value: "/api"},
	}}}})
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	w := new(wireRequest)
	allocs := testing.AllocsPerRun(100, func() {
		*w = wireRequest{}
		codec{}.Unmarshal(data, w)
	})
	if w.err != nil || allocs > 1 {
		t.Errorf("decoding %v: %.0f allocations, error %v; want 1, none", &w.RateLimitRequest, allocs, w.err)
	}
}

// randResponse is a response as the service writes them (plain), or, when
// plain is false, possibly with the fields the codec leaves to grpc's.
func randResponse(r *rand.Rand, plain bool) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_Code(r.IntN(4) - 1)}
	for range r.IntN(4) {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(r.IntN(3)), LimitRemaining: r.Uint32() >> r.IntN(33)}
		if r.IntN(4) > 0 {
			st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: randText(r), RequestsPerUnit: r.Uint32() >> r.IntN(33), Unit: rlspb.RateLimitResponse_RateLimit_Unit(r.IntN(8) - 1)}
			if !plain && r.IntN(4) == 0 {
				st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(3)
			}
		}
		if r.IntN(4) > 0 {
			st.DurationUntilReset = &durationpb.Duration{Seconds: r.Int64N(1<<40) - 1<<39, Nanos: r.Int32N(2e9) - 1e9}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	for range r.IntN(4) {
		h := &corepb.HeaderValue{Key: randText(r), Value: randText(r)}
		if r.IntN(4) == 0 {
			h.RawValue = []byte(randText(r))
		}
		if r.IntN(2) == 0 {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, h)
		} else {
			resp.RequestHeadersToAdd = append(resp.RequestHeadersToAdd, h)
		}
	}
	if r.IntN(4) == 0 {
		resp.RawBody = []byte(randText(r))
	}
	if !plain && r.IntN(4) == 0 {
		resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"a": "b"})
	}
	return resp
}

func TestCodecEncodesAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		resp := randResponse(r, i%2 == 0)
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if plainResponse(resp) {
			if got := appendResponse(nil, resp); !bytes.Equal(got, want) || sizeResponse(resp) != len(want) {
				t.Fatalf("%v: codec writes %x (size %d), proto.Marshal %x", resp, got, sizeResponse(resp), want)
			}
		}
		data, err := codec{}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var back rlspb.RateLimitResponse
		if err := proto.Unmarshal(data.Materialize(), &back); err != nil || !proto.Equal(&back, resp) {
			t.Fatalf("%v: codec writes what decodes as %v (%v)", resp, &back, err)
		}
		data.Free()
	}
}

// The codec leaves other messages to grpc's codec.
func TestCodecOtherMessages(t *testing.T) {
	in := wrapperspb.String("other")
	data, err := codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out wrapperspb.StringValue
	if err := (codec{}).Unmarshal(data, &out); err != nil || out.Value != "other" {
		t.Errorf("round trip of %v: %v, %v", in, &out, err)
	}
}

func FuzzCodecRequest(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		b, _ := proto.Marshal(randRequest(r, true))
		f.Add(appendUnknown(r, b))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

func FuzzCodecResponse(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		resp := randResponse(rand.New(rand.NewPCG(s1, s2)), true)
		want, _ := proto.Marshal(resp)
		if got := appendResponse(nil, resp); !bytes.Equal(got, want) {
			t.Fatalf("%v: codec writes %x, proto.Marshal %x", resp, got, want)
		}
	})
}

// BenchmarkCodec compares the codec with grpc's standard one on a request
// of one descriptor and the service's answer to it, RateLimit headers on.
func BenchmarkCodec(b *testing.B) {
	req, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "load", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "12345678"}}}}})
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
		Code: rlspb.RateLimitResponse_OK, CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000000000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR},
		LimitRemaining: 999999999, DurationUntilReset: durationpb.New(3000e9),
	}}, ResponseHeadersToAdd: []*corepb.HeaderValue{
		{Key: "RateLimit-Policy", Value: `"user";q=1000000000;w=3600`}, {Key: "RateLimit", Value: `"user";r=999999999;t=3000`},
	}}
	data := mem.BufferSlice{mem.SliceBuffer(req)}
	for _, c := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
			Unmarshal(mem.BufferSlice, any) error
		}
		in func() any
	}{
		{"standard", standard, func() any { return new(rlspb.RateLimitRequest) }},
		{"sluice", codec{}, func() any { return new(wireRequest) }},
	} {
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.codec.Unmarshal(data, c.in()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
