package main

import (
	"bufio"
	be "encoding/binary"
	"io"
	"testing"
	"time"
)

// h2frame is one HTTP/2 frame written by hand (RFC 9113 §4.1).
func h2frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := make([]byte, 9, 9+len(payload))
	n := len(payload)
	f[0], f[1], f[2], f[3], f[4] = byte(n>>16), byte(n>>8), byte(n), typ, flags
	be.BigEndian.PutUint32(f[5:], stream)
	return append(f, payload...)
}

// TestRapidReset floods the gRPC listener with streams that the client
// opens and at once resets (CVE-2023-44487): sluice answers with a GOAWAY
// ENHANCE_YOUR_CALM and closes the connection long before 200,000 resets.
func TestRapidReset(t *testing.T) {
	p := start(t, nil)
	c := dialAll(t, p.addrs["grpc"], 1)[0]

	// A HEADERS block in HPACK's static table and literals: :method POST,
	// :scheme http, :path /, content-type application/grpc.
	block := append([]byte{0x83, 0x86, 0x84, 0x5f, 16}, "application/grpc"...)
	cancel := []byte{0, 0, 0, 8} // CANCEL

	goaway := make(chan uint32, 1) // its error code
	go func() {
		defer close(goaway)
		br := bufio.NewReader(c)
		hdr := make([]byte, 9)
		for {
			if _, err := io.ReadFull(br, hdr); err != nil {
				return
			}
			n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
			payload := make([]byte, n)
			if _, err := io.ReadFull(br, payload); err != nil {
				return
			}
			if hdr[3] == 0x7 && n >= 8 {
				goaway <- be.BigEndian.Uint32(payload[4:8])
				return
			}
		}
	}()

	w := bufio.NewWriterSize(c, 64<<10)
	w.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	w.Write(h2frame(0x4, 0, 0, nil)) // SETTINGS
	const pairs = 200_000
	sent := 0
	c.SetWriteDeadline(time.Now().Add(60 * time.Second))
	for stream := uint32(1); sent < pairs; stream += 2 {
		w.Write(h2frame(0x1, 0x4, stream, block)) // HEADERS, END_HEADERS
		if _, err := w.Write(h2frame(0x3, 0, stream, cancel)); err != nil {
			break // the server closed the connection
		}
		sent++
	}
	w.Flush()
	select {
	case code, ok := <-goaway:
		if !ok {
			t.Fatalf("the connection closed without a GOAWAY after %d resets", sent)
		}
		if code != 0xb {
			t.Errorf("GOAWAY with code %#x, want ENHANCE_YOUR_CALM (0xb)", code)
		}
		t.Logf("GOAWAY ENHANCE_YOUR_CALM; %d of %d resets written before the connection failed", sent, pairs)
	case <-time.After(30 * time.Second):
		t.Fatalf("no GOAWAY 30 s after %d rapid resets", sent)
	}
	if r := get(t, p.url("admin", "/healthz")); r.status != 200 {
		t.Errorf("/healthz after the flood: %d", r.status)
	}
}
