package listen

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

func frame(typ byte, stream uint32, payload []byte) []byte {
	f := make([]byte, 9, 9+len(payload))
	f[0], f[1], f[2], f[3] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload)), typ
	binary.BigEndian.PutUint32(f[5:], stream)
	return append(f, payload...)
}

// TestFrameScanner feeds the scanner a preface and frames one byte at a
// time and all at once: it sees the same frame headers either way.
func TestFrameScanner(t *testing.T) {
	var in []byte
	in = append(in, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...)
	in = append(in, frame(0x4, 0, nil)...)
	in = append(in, frame(frameHeaders, 1, bytes.Repeat([]byte{'h'}, 300))...)
	in = append(in, frame(frameRSTStream, 1, []byte{0, 0, 0, 8})...)
	in = append(in, frame(0x0, 3, bytes.Repeat([]byte{'d'}, 70000))...)
	want := []uint32{0x4<<24 | 0, frameHeaders<<24 | 1, frameRSTStream<<24 | 1, 3}
	for _, chunk := range []int{1, 7, len(in)} {
		s := frameScanner{preface: clientPrefaceLen}
		var got []uint32
		for b := in; len(b) > 0; {
			k := min(chunk, len(b))
			s.scan(b[:k], func(typ byte, stream uint32) { got = append(got, uint32(typ)<<24|stream) })
			b = b[k:]
		}
		if !slices.Equal(got, want) || !s.atBoundary() {
			t.Errorf("chunks of %d: frames %x, at a boundary %v; want %x, true", chunk, got, s.atBoundary(), want)
		}
	}
}

// TestResetGuard: resetBurst resets pass; the next one fails the read and
// puts a GOAWAY after the frame the server was in the middle of writing,
// never inside it.
func TestResetGuard(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	g := newResetGuard(server)
	now := time.Unix(0, 0)
	g.now = func() time.Time { return now }
	g.last = now
	defer g.Close()

	out := make(chan []byte, 1) // what the client reads
	go func() { b, _ := io.ReadAll(client); out <- b }()
	half := frame(0x0, 1, []byte("0123456789"))
	g.Write(half[:12]) // a frame begun

	go func() {
		client.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		client.Write(frame(frameHeaders, 7, nil))
		for range resetBurst + 1 {
			client.Write(frame(frameRSTStream, 7, []byte{0, 0, 0, 8}))
		}
	}()
	buf := make([]byte, 64)
	var err error
	for resets := 0; err == nil; {
		_, err = g.Read(buf)
		if resets++; resets > 10*resetBurst {
			t.Fatal("never tripped")
		}
	}
	if err != errResetFlood {
		t.Fatalf("read error %v, want errResetFlood", err)
	}
	g.Write(half[12:]) // the frame ends; the GOAWAY follows it
	g.Close()
	got := <-out
	if !bytes.HasPrefix(got, half) {
		t.Fatalf("the server's frame was cut: %x", got)
	}
	goaway := got[len(half):]
	if len(goaway) < 17 || goaway[3] != frameGoAway || binary.BigEndian.Uint32(goaway[9:]) != 7 || binary.BigEndian.Uint32(goaway[13:]) != errEnhanceYourCalm {
		t.Errorf("after the frame: %x, want GOAWAY last stream 7 ENHANCE_YOUR_CALM", goaway)
	}
}

// BenchmarkFrameScanner: what the reset guard adds to a read of an RLS
// call (a HEADERS frame of 120 bytes and a DATA frame of 80).
func BenchmarkFrameScanner(b *testing.B) {
	call := append(frame(frameHeaders, 1, make([]byte, 120)), frame(0x0, 1, make([]byte, 80))...)
	s := frameScanner{}
	g := &resetGuard{}
	b.SetBytes(int64(len(call)))
	b.ReportAllocs()
	for b.Loop() {
		s.scan(call, g.frame)
	}
}
