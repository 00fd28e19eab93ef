package listen

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// The rapid-reset bound of a gRPC connection: a client may reset up to
// resetBurst streams at once and resetRate a second after that. A reset
// costs the server a stream's setup (headers decoded, a handler started)
// and the client nothing; past the bound the connection gets a GOAWAY
// (ENHANCE_YOUR_CALM) and is closed. An Envoy cancelling calls that time
// out stays far below it unless sluice stalls for seconds under heavy load,
// and then a reconnect costs it little.
const (
	resetBurst = 1000
	resetRate  = 100 // a second
)

// HTTP/2 frame types and codes the guard reads or writes (RFC 9113).
const (
	frameHeaders       = 0x1
	frameRSTStream     = 0x3
	frameGoAway        = 0x7
	errEnhanceYourCalm = 0xb
	clientPrefaceLen   = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

var errResetFlood = errors.New("sluice: too many HTTP/2 stream resets")

// frameScanner follows the HTTP/2 frames of one direction of a
// connection, calling fn with each frame's type and stream as its header
// completes. It reads headers only and skips payloads.
type frameScanner struct {
	preface int // bytes of the client preface still to skip
	hdr     [9]byte
	n       int // bytes of hdr held
	skip    int // payload bytes still to skip
}

func (s *frameScanner) scan(b []byte, fn func(typ byte, stream uint32)) {
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			k := min(s.preface, len(b))
			s.preface -= k
			b = b[k:]
		case s.skip > 0:
			k := min(s.skip, len(b))
			s.skip -= k
			b = b[k:]
		default:
			k := copy(s.hdr[s.n:], b)
			s.n += k
			b = b[k:]
			if s.n == len(s.hdr) {
				s.n = 0
				s.skip = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
				fn(s.hdr[3], binary.BigEndian.Uint32(s.hdr[5:])&0x7fffffff)
			}
		}
	}
}

// atBoundary reports whether the bytes scanned end with a whole frame.
func (s *frameScanner) atBoundary() bool { return s.preface == 0 && s.n == 0 && s.skip == 0 }

// resetGuard is a gRPC server connection that counts the client's
// RST_STREAM frames against a token bucket (resetBurst, resetRate); when
// the bucket is empty it writes a GOAWAY between the server's frames and
// fails the next read, so grpc closes the connection. grpc-go bounds the
// work of such a flood but never answers it with a GOAWAY.
type resetGuard struct {
	net.Conn
	now func() time.Time

	rmu     sync.Mutex // the read side
	rd      frameScanner
	tokens  float64
	last    time.Time
	stream  uint32 // the highest stream the client opened
	tripped bool

	wmu     sync.Mutex // the write side
	wr      frameScanner
	pending bool // a GOAWAY waits for a frame boundary
	sent    bool
	lastID  uint32 // the GOAWAY's last stream
}

func newResetGuard(c net.Conn) *resetGuard {
	g := &resetGuard{Conn: c, now: time.Now, tokens: resetBurst}
	g.rd.preface = clientPrefaceLen
	g.last = g.now()
	return g
}

func (g *resetGuard) Read(p []byte) (int, error) {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	if g.tripped {
		return 0, errResetFlood
	}
	n, err := g.Conn.Read(p)
	g.rd.scan(p[:n], g.frame)
	if g.tripped {
		g.goAway(g.stream)
		return 0, errResetFlood
	}
	return n, err
}

// frame takes one frame header the client sent.
func (g *resetGuard) frame(typ byte, stream uint32) {
	switch typ {
	case frameHeaders:
		g.stream = max(g.stream, stream)
	case frameRSTStream:
		now := g.now()
		g.tokens = min(resetBurst, g.tokens+now.Sub(g.last).Seconds()*resetRate)
		g.last = now
		if g.tokens < 1 {
			g.tripped = true
			return
		}
		g.tokens--
	}
}

func (g *resetGuard) Write(p []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	n, err := g.Conn.Write(p)
	g.wr.scan(p[:n], func(byte, uint32) {})
	if g.pending && err == nil && g.wr.atBoundary() {
		g.writeGoAway()
	}
	return n, err
}

// goAway sends the GOAWAY now if the server is between frames, else after
// the frame it is writing.
func (g *resetGuard) goAway(last uint32) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.lastID = last
	if g.sent {
		return
	}
	if g.wr.atBoundary() {
		g.writeGoAway()
		return
	}
	g.pending = true
}

func (g *resetGuard) writeGoAway() {
	g.pending, g.sent = false, true
	debug := "too_many_resets"
	f := make([]byte, 9+8+len(debug))
	n := 8 + len(debug)
	f[0], f[1], f[2], f[3] = byte(n>>16), byte(n>>8), byte(n), frameGoAway
	binary.BigEndian.PutUint32(f[9:], g.lastID&0x7fffffff)
	binary.BigEndian.PutUint32(f[13:], errEnhanceYourCalm)
	copy(f[17:], debug)
	g.Conn.SetWriteDeadline(time.Now().Add(time.Second)) // deadlines are wall-clock times
	g.Conn.Write(f)
}

// resetGuardListener wraps each accepted connection in a resetGuard.
type resetGuardListener struct{ net.Listener }

func (l resetGuardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newResetGuard(c), nil
}

// ResetGuard wraps each connection ln accepts in the guard against HTTP/2
// stream-reset floods.
func ResetGuard(ln net.Listener) net.Listener { return resetGuardListener{ln} }
