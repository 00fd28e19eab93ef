package llmusage

// scanner is a streaming JSON tokenizer with fixed memory: it is fed a
// document a byte at a time, never holds more than the path to the current
// value (keys cut at maxKey bytes) and the first maxTok bytes of the
// current scalar, and calls visit for each scalar value with its path. A
// document deeper than maxDepth, or one that is not JSON, stops it: err is
// set and the rest is ignored until reset.
type scanner struct {
	st    state
	depth int
	arr   [maxDepth]bool  // the container at each level is an array
	idx   [maxDepth]int64 // the index of the current element of an array
	key   [maxDepth]keyBuf
	token
	isKey bool
	lit   string // the literal being read (true, false, null)
	litN  int
	err   bool
	v     visitor
}

// visitor is told what a scanner reads: each scalar value, and each key.
type visitor interface {
	visit(s *scanner, k valueKind, text []byte, raw int64)
	keyed(s *scanner)
}

const (
	maxDepth = 32
	maxKey   = 64
	maxTok   = 128
)

// token is the scalar being read: a key, a string's first bytes (escapes
// decoded) or a number.
type token struct {
	tok  [maxTok]byte
	n    int   // bytes of tok in use
	over bool  // the token was longer than tok
	raw  int64 // raw bytes of the current string
	esc  int8  // 0 none, 1 after '\', 2-5 reading the \u digits
	hex  rune
}

type keyBuf struct {
	b [maxKey]byte
	n int // len; maxKey+1 marks a key too long to match any path
}

type state uint8

const (
	stValue      state = iota // a value is expected
	stValueOrEnd              // after '[': a value or ']'
	stKeyOrEnd                // after '{': a key or '}'
	stKey                     // after ',' in an object: a key
	stColon                   // after a key
	stAfter                   // after a value: ',' or the container's end
	stString
	stNumber
	stLiteral
	stDone // the document's value is complete
)

type valueKind uint8

const (
	kString valueKind = iota + 1
	kNumber
	kTrue
	kFalse
	kNull
)

// reset makes s ready for a new document.
func (s *scanner) reset() {
	v := s.v
	*s = scanner{v: v}
}

// complete reports whether s has read one whole, well-formed document.
func (s *scanner) complete() bool {
	if s.st == stNumber && s.depth == 0 && !s.err {
		s.endNumber()
	}
	return s.st == stDone && !s.err
}

// write feeds p to s. The plain bytes of a string, most of an answer,
// are taken in runs.
func (s *scanner) write(p []byte) {
	for i := 0; i < len(p) && !s.err; i++ {
		if s.st == stString && s.esc == 0 {
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				j++
			}
			s.addRun(p[i:j])
			if i = j; i == len(p) {
				return
			}
		}
		s.step(p[i])
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) step(c byte) {
	switch s.st {
	case stString:
		switch end, bad := s.stringByte(c); {
		case bad:
			s.err = true
		case end:
			s.endString()
		}
	case stNumber:
		if '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			s.add(c)
			return
		}
		s.endNumber()
		if !s.err {
			s.step(c)
		}
	case stLiteral:
		if c != s.lit[s.litN] {
			s.err = true
			return
		}
		if s.litN++; s.litN == len(s.lit) {
			s.endLiteral()
		}
	default:
		if !isSpace(c) {
			s.structural(c)
		}
	}
}

// structural handles a byte that is not whitespace outside strings,
// numbers and literals.
func (s *scanner) structural(c byte) {
	switch s.st {
	case stKeyOrEnd, stKey:
		switch {
		case c == '"':
			s.startString(true)
		case c == '}' && s.st == stKeyOrEnd:
			s.depth--
			s.ended()
		default:
			s.err = true
		}
	case stColon:
		if c != ':' {
			s.err = true
		}
		s.st = stValue
	case stAfter:
		s.after(c)
	case stValueOrEnd:
		if c == ']' {
			s.depth--
			s.ended()
			return
		}
		s.value(c)
	case stValue:
		s.value(c)
	default: // stDone: one value per document
		s.err = true
	}
}

// after handles what follows a value inside a container.
func (s *scanner) after(c byte) {
	top := s.depth - 1
	switch {
	case c == ',' && s.arr[top]:
		s.idx[top]++
		s.st = stValue
	case c == ',':
		s.st = stKey
	case c == ']' && s.arr[top], c == '}' && !s.arr[top]:
		s.depth--
		s.ended()
	default:
		s.err = true
	}
}

// value starts a value with its first byte c.
func (s *scanner) value(c byte) {
	switch {
	case c == '{' || c == '[':
		if s.depth == maxDepth {
			s.err = true
			return
		}
		s.arr[s.depth], s.idx[s.depth], s.key[s.depth].n = c == '[', 0, 0
		s.depth++
		s.st = stKeyOrEnd
		if c == '[' {
			s.st = stValueOrEnd
		}
	case c == '"':
		s.startString(false)
	case c == '-' || '0' <= c && c <= '9':
		s.n, s.over, s.st = 0, false, stNumber
		s.add(c)
	case c == 't':
		s.lit, s.litN, s.st = "true", 1, stLiteral
	case c == 'f':
		s.lit, s.litN, s.st = "false", 1, stLiteral
	case c == 'n':
		s.lit, s.litN, s.st = "null", 1, stLiteral
	default:
		s.err = true
	}
}

// ended moves s past a complete value.
func (s *scanner) ended() {
	if s.depth == 0 {
		s.st = stDone
	} else {
		s.st = stAfter
	}
}

// addRun adds the plain bytes b of a string.
func (s *token) addRun(b []byte) {
	s.raw += int64(len(b))
	n := copy(s.tok[s.n:], b)
	s.n += n
	s.over = s.over || n < len(b)
}

func (s *token) add(c byte) {
	if s.n < len(s.tok) {
		s.tok[s.n] = c
		s.n++
	} else {
		s.over = true
	}
}

func (s *scanner) startString(isKey bool) {
	s.n, s.over, s.raw, s.isKey, s.esc, s.st = 0, false, 0, isKey, 0, stString
}

// stringByte reads one byte of a string: end reports its closing quote,
// bad a byte a JSON string cannot hold. Escapes are decoded into tok; raw
// counts the bytes as sent.
func (s *token) stringByte(c byte) (end, bad bool) {
	s.raw++
	switch {
	case s.esc == 1:
		return false, !s.escape(c)
	case s.esc > 1:
		d := hexDigit(c)
		if d < 0 {
			return false, true
		}
		s.hex = s.hex<<4 | rune(d)
		if s.esc++; s.esc == 6 {
			s.esc = 0
			s.addRune(s.hex)
		}
	case c == '\\':
		s.esc = 1
	case c == '"':
		s.raw--
		return true, false
	case c < 0x20:
		return false, true
	default:
		s.add(c)
	}
	return false, false
}

// escape reads the byte after a backslash; false when it is not an escape.
func (s *token) escape(c byte) bool {
	s.esc = 0
	switch c {
	case '"', '\\', '/':
		s.add(c)
	case 'b':
		s.add('\b')
	case 'f':
		s.add('\f')
	case 'n':
		s.add('\n')
	case 'r':
		s.add('\r')
	case 't':
		s.add('\t')
	case 'u':
		s.esc, s.hex = 2, 0
	default:
		return false
	}
	return true
}

func hexDigit(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// addRune appends r in UTF-8 (a lone surrogate as U+FFFD).
func (s *token) addRune(r rune) {
	if r >= 0xD800 && r < 0xE000 {
		r = 0xFFFD
	}
	var b [4]byte
	n := encodeRune(b[:], r)
	for _, c := range b[:n] {
		s.add(c)
	}
}

func encodeRune(b []byte, r rune) int {
	switch {
	case r < 0x80:
		b[0] = byte(r)
		return 1
	case r < 0x800:
		b[0], b[1] = 0xC0|byte(r>>6), 0x80|byte(r)&0x3F
		return 2
	default:
		b[0], b[1], b[2] = 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F
		return 3
	}
}

func (s *scanner) endString() {
	if s.isKey {
		k := &s.key[s.depth-1]
		k.n = copy(k.b[:], s.tok[:min(s.n, maxKey)])
		if s.over || s.n > maxKey {
			k.n = maxKey + 1
		}
		s.st = stColon
		if s.v != nil {
			s.v.keyed(s)
		}
		return
	}
	s.emit(kString, s.tok[:s.n], s.raw)
}

func (s *scanner) endNumber() {
	if !validNumber(s.tok[:s.n]) && !s.over {
		s.err = true
		return
	}
	s.emit(kNumber, s.tok[:s.n], int64(s.n))
}

func (s *scanner) endLiteral() {
	k := kNull
	switch s.lit {
	case "true":
		k = kTrue
	case "false":
		k = kFalse
	}
	s.emit(k, nil, 0)
}

func (s *scanner) emit(k valueKind, text []byte, raw int64) {
	if s.v != nil {
		s.v.visit(s, k, text, raw)
	}
	s.ended()
}

// validNumber reports whether b is a JSON number.
func validNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	var ok bool
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i, _ = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if i, ok = digits(b, i+1); !ok {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = digits(b, i); !ok {
			return false
		}
	}
	return i == len(b)
}

// digits returns the index past the decimal digits of b from i, and
// whether there was at least one.
func digits(b []byte, i int) (int, bool) {
	j := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i, i > j
}

// at reports whether the current value of s is at p.
func (p path) at(s *scanner) bool {
	return len(p) == s.depth && p.under(s)
}

// under reports whether p goes through the current container of s (the
// key just read, in an object).
func (p path) under(s *scanner) bool {
	if len(p) < s.depth {
		return false
	}
	for i, seg := range p[:s.depth] {
		if !seg.matches(s, i) {
			return false
		}
	}
	return true
}

// lastKey is the key of the current value, "" in an array or at the top.
func (s *scanner) lastKey() []byte {
	if s.depth == 0 || s.arr[s.depth-1] {
		return nil
	}
	k := &s.key[s.depth-1]
	if k.n > maxKey {
		return nil
	}
	return k.b[:k.n]
}
