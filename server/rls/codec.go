package rls

import (
	"errors"
	"fmt"
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ServerCodec is a grpc.ServerOption that gives a server the service's own
// protobuf codec: it decodes a RateLimitRequest and encodes a
// RateLimitResponse by hand (the same wire format, no reflection; the
// usual request costs one allocation, the copy of its strings), and leaves
// every other message, such as the health service's, to grpc's standard
// codec. With it, a malformed request is answered InvalidArgument (grpc
// answers Internal for what its codec cannot decode), and a request beyond
// the service's Bounds on descriptors or entries is refused having decoded
// no more than those. Register works without it.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(codec{}) }

// codec is the encoding.CodecV2 of ServerCodec.
type codec struct{}

var _ encoding.CodecV2 = codec{}

// standard is grpc's protobuf codec, for the messages codec leaves alone.
var standard = encoding.GetCodecV2(protocodec.Name)

func (codec) Name() string { return protocodec.Name }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*rlspb.RateLimitResponse)
	if !ok || !plainResponse(resp) {
		return standard.Marshal(v)
	}
	size := sizeResponse(resp)
	if mem.IsBelowBufferPoolingThreshold(size) { // grpc pools no smaller buffer
		return mem.BufferSlice{mem.SliceBuffer(appendResponse(make([]byte, 0, size), resp))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendResponse((*buf)[:0], resp)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireRequest); ok {
		w.err = unmarshalRequest(data, w)
		return nil // answered InvalidArgument by the handler
	}
	return standard.Unmarshal(data, v)
}

// wireRequest is a RateLimitRequest as the service's handler receives it:
// the request (it is a proto.Message, so grpc's standard codec can decode
// it too), why the codec could not decode it, and room for the usual
// request's descriptor and entries, so that they need no allocation of
// their own.
type wireRequest struct {
	rlspb.RateLimitRequest
	err    error
	bounds *Bounds // the service's; nil: the defaults

	descs [1]commonpb.RateLimitDescriptor
	dptrs [1]*commonpb.RateLimitDescriptor
	ents  [3]commonpb.RateLimitDescriptor_Entry
	eptrs [3]*commonpb.RateLimitDescriptor_Entry
	nents int // of ents used
}

var defaultBounds = Bounds{}.withDefaults()

// limits are the bounds w is decoded within.
func (w *wireRequest) limits() *Bounds {
	if w.bounds == nil {
		return &defaultBounds
	}
	return w.bounds
}

// unmarshalRequest decodes data into w.
func unmarshalRequest(data mem.BufferSlice, w *wireRequest) error {
	if len(data) == 1 {
		return w.decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return w.decode(buf.ReadOnlyData())
}

var errMalformed = errors.New("rls: malformed request: not a RateLimitRequest in protobuf wire format")

// decode decodes b into w as proto.Unmarshal would, but for unknown
// fields, which it skips, and descriptors and entries past the bounds,
// which it only counts, to refuse the request. Its strings share one copy
// of b, made once.
func (w *wireRequest) decode(b []byte) error {
	req := &w.RateLimitRequest
	req.Descriptors = w.dptrs[:0]
	n := 0 // descriptors
	err := wire{b, string(b)}.fields(func(num protowire.Number, typ protowire.Type, v uint64, f wire) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.ValidString(f.s) {
				return errUTF8
			}
			req.Domain = f.s
		case num == 2 && typ == protowire.BytesType:
			if n++; n > w.limits().Descriptors {
				return nil
			}
			desc := w.descriptor(len(req.Descriptors))
			if err := w.decodeDescriptor(f, desc, len(req.Descriptors)); err != nil {
				return err
			}
			req.Descriptors = append(req.Descriptors, desc)
		case num == 3 && typ == protowire.VarintType:
			req.HitsAddend = uint32(v)
		}
		return nil
	})
	if err == nil && n > w.limits().Descriptors {
		err = fmt.Errorf("rls: the request has %d descriptors, more than %d", n, w.limits().Descriptors)
	}
	return err
}

var errUTF8 = errors.New("rls: malformed request: a string is not valid UTF-8")

// descriptor returns the i-th descriptor to decode into.
func (w *wireRequest) descriptor(i int) *commonpb.RateLimitDescriptor {
	if i < len(w.descs) {
		return &w.descs[i]
	}
	return new(commonpb.RateLimitDescriptor)
}

// entry returns an entry to decode into.
func (w *wireRequest) entry() *commonpb.RateLimitDescriptor_Entry {
	if w.nents < len(w.ents) {
		w.nents++
		return &w.ents[w.nents-1]
	}
	return new(commonpb.RateLimitDescriptor_Entry)
}

// decodeDescriptor decodes s, the i-th descriptor of the request, into desc.
func (w *wireRequest) decodeDescriptor(m wire, desc *commonpb.RateLimitDescriptor, i int) error {
	if i == 0 {
		desc.Entries = w.eptrs[:0]
	}
	n := 0 // entries
	err := m.fields(func(num protowire.Number, typ protowire.Type, v uint64, f wire) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if n++; n > w.limits().Entries {
				return nil
			}
			e := w.entry()
			if err := decodeEntry(f, e); err != nil {
				return err
			}
			desc.Entries = append(desc.Entries, e)
		case num == 2 && typ == protowire.BytesType:
			if desc.Limit == nil {
				desc.Limit = new(commonpb.RateLimitDescriptor_RateLimitOverride)
			}
			return decodeOverride(f, desc.Limit)
		case num == 3 && typ == protowire.BytesType:
			if desc.HitsAddend == nil {
				desc.HitsAddend = new(wrapperspb.UInt64Value)
			}
			return decodeUInt64(f, desc.HitsAddend)
		case num == 4 && typ == protowire.VarintType:
			desc.IsNegativeHits = v != 0
		}
		return nil
	})
	if err == nil && n > w.limits().Entries {
		err = fmt.Errorf("rls: descriptor %d has %d entries, more than %d", i, n, w.limits().Entries)
	}
	return err
}

func decodeEntry(m wire, e *commonpb.RateLimitDescriptor_Entry) error {
	return m.fields(func(num protowire.Number, typ protowire.Type, _ uint64, f wire) error {
		if typ != protowire.BytesType || num != 1 && num != 2 {
			return nil
		}
		if !utf8.ValidString(f.s) {
			return errUTF8
		}
		if num == 1 {
			e.Key = f.s
		} else {
			e.Value = f.s
		}
		return nil
	})
}

func decodeOverride(m wire, ov *commonpb.RateLimitDescriptor_RateLimitOverride) error {
	return m.fields(func(num protowire.Number, typ protowire.Type, v uint64, f wire) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			ov.RequestsPerUnit = uint32(v)
		case num == 2 && typ == protowire.VarintType:
			ov.Unit = typepb.RateLimitUnit(int32(v))
		case num == 3 && typ == protowire.BytesType:
			if ov.UnitMultiplier == nil {
				ov.UnitMultiplier = new(wrapperspb.UInt32Value)
			}
			return decodeUInt32(f, ov.UnitMultiplier)
		}
		return nil
	})
}

func decodeUInt64(m wire, u *wrapperspb.UInt64Value) error {
	return m.fields(func(num protowire.Number, typ protowire.Type, v uint64, _ wire) error {
		if num == 1 && typ == protowire.VarintType {
			u.Value = v
		}
		return nil
	})
}

func decodeUInt32(m wire, u *wrapperspb.UInt32Value) error {
	return m.fields(func(num protowire.Number, typ protowire.Type, v uint64, _ wire) error {
		if num == 1 && typ == protowire.VarintType {
			u.Value = uint32(v)
		}
		return nil
	})
}

// wire is a message in protobuf wire format: its bytes, and the same
// bytes as a string, which decoded strings are slices of.
type wire struct {
	b []byte
	s string
}

// fields calls fn with each field of m in order: its number, its wire
// type, its value if a varint, its contents if length-delimited. Fields of
// other wire types (fixed, groups) are skipped. It stops at fn's first
// error, and returns errMalformed where proto.Unmarshal fails on the
// framing: a truncated field, an invalid field number, a stray end of
// group.
func (m wire) fields(fn func(num protowire.Number, typ protowire.Type, v uint64, f wire) error) error {
	for i := 0; i < len(m.b); {
		tag, n := protowire.ConsumeVarint(m.b[i:])
		if n < 0 || tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
			return errMalformed
		}
		i += n
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		var v uint64
		var f wire
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(m.b[i:])
		case protowire.BytesType:
			var l uint64
			if l, n = protowire.ConsumeVarint(m.b[i:]); n >= 0 && l > uint64(len(m.b)-i-n) {
				n = -1
			}
			if n >= 0 {
				f = wire{m.b[i+n : i+n+int(l)], m.s[i+n : i+n+int(l)]}
				n += int(l)
			}
		case protowire.EndGroupType:
			n = -1
		default:
			n = protowire.ConsumeFieldValue(num, typ, m.b[i:])
		}
		if n < 0 {
			return errMalformed
		}
		i += n
		if err := fn(num, typ, v, f); err != nil {
			return err
		}
	}
	return nil
}

// plainResponse reports whether resp holds only what appendResponse
// writes: no dynamic_metadata, quota or unit_multiplier, no nil status or
// header. The service's answers are plain; others go to grpc's codec.
func plainResponse(resp *rlspb.RateLimitResponse) bool {
	if resp.DynamicMetadata != nil || resp.Quota != nil {
		return false
	}
	for _, st := range resp.Statuses {
		if st == nil || st.Quota != nil || st.CurrentLimit != nil && st.CurrentLimit.UnitMultiplier != nil {
			return false
		}
	}
	for _, hs := range [2][]*corepb.HeaderValue{resp.ResponseHeadersToAdd, resp.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil {
				return false
			}
		}
	}
	return true
}

// The encoding below writes the fields of a plain response in field
// number order, as proto.Marshal does, so that it writes the same bytes.

func sizeResponse(r *rlspb.RateLimitResponse) int {
	n := sizeVarint(1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		n += sizeMessage(2, sizeStatus(st))
	}
	n += sizeHeaders(3, r.ResponseHeadersToAdd) + sizeHeaders(4, r.RequestHeadersToAdd)
	return n + sizeBytes(5, len(r.RawBody))
}

func appendResponse(b []byte, r *rlspb.RateLimitResponse) []byte {
	b = appendVarint(b, 1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeStatus(st)))
		b = appendStatus(b, st)
	}
	b = appendHeaders(b, 3, r.ResponseHeadersToAdd)
	b = appendHeaders(b, 4, r.RequestHeadersToAdd)
	return appendBytes(b, 5, r.RawBody)
}

func sizeStatus(st *rlspb.RateLimitResponse_DescriptorStatus) int {
	n := sizeVarint(1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		n += sizeMessage(2, sizeLimit(l))
	}
	n += sizeVarint(3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		n += sizeMessage(4, sizeVarint(1, uint64(d.Seconds))+sizeVarint(2, uint64(int64(d.Nanos))))
	}
	return n
}

func appendStatus(b []byte, st *rlspb.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarint(b, 1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeLimit(l)))
		b = appendVarint(b, 1, uint64(l.RequestsPerUnit))
		b = appendVarint(b, 2, uint64(l.Unit))
		b = appendBytes(b, 3, l.Name)
	}
	b = appendVarint(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeVarint(1, uint64(d.Seconds))+sizeVarint(2, uint64(int64(d.Nanos)))))
		b = appendVarint(b, 1, uint64(d.Seconds))
		b = appendVarint(b, 2, uint64(int64(d.Nanos)))
	}
	return b
}

func sizeLimit(l *rlspb.RateLimitResponse_RateLimit) int {
	return sizeVarint(1, uint64(l.RequestsPerUnit)) + sizeVarint(2, uint64(l.Unit)) + sizeBytes(3, len(l.Name))
}

func sizeHeaders(num protowire.Number, hs []*corepb.HeaderValue) int {
	n := 0
	for _, h := range hs {
		n += sizeMessage(num, sizeHeader(h))
	}
	return n
}

func sizeHeader(h *corepb.HeaderValue) int {
	return sizeBytes(1, len(h.Key)) + sizeBytes(2, len(h.Value)) + sizeBytes(3, len(h.RawValue))
}

func appendHeaders(b []byte, num protowire.Number, hs []*corepb.HeaderValue) []byte {
	for _, h := range hs {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeHeader(h)))
		b = appendBytes(b, 1, h.Key)
		b = appendBytes(b, 2, h.Value)
		b = appendBytes(b, 3, h.RawValue)
	}
	return b
}

// sizeVarint and appendVarint: a proto3 scalar, left out when zero.
func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// sizeBytes and appendBytes: a proto3 string or bytes, left out when empty.
func sizeBytes(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendBytes[S ~string | ~[]byte](b []byte, num protowire.Number, v S) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(len(v)))
	return append(b, v...)
}

// sizeMessage is the size of a message field whose contents are n bytes
// (written even when empty, as a set message field is).
func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}
