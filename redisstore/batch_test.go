package redisstore

import (
	"errors"
	"testing"
)

// A batch reply is split by the strides it carries; every malformed reply
// is an error, never a panic or a misattributed decision.
func TestSplitReply(t *testing.T) {
	six := []any{int64(1), int64(5), int64(4), int64(0), int64(1), int64(0)}
	good := append(append([]any{int64(6)}, six...), append([]any{int64(8)}, append(six, "7", "")...)...)
	pos := 0
	a, err := splitReply(good, &pos, 1)
	if err != nil || len(a) != 6 || pos != 7 {
		t.Fatalf("first part: %v %v at %d", a, err, pos)
	}
	b, err := splitReply(good, &pos, 1)
	if err != nil || len(b) != 8 || b[6] != "7" || pos != len(good) {
		t.Fatalf("second part: %v %v at %d", b, err, pos)
	}
	for name, reply := range map[string][]any{
		"empty":          {},
		"stride missing": {"6"},
		"stride 7":       append([]any{int64(7)}, six...),
		"short":          append([]any{int64(6)}, six[:5]...),
	} {
		pos := 0
		if _, err := splitReply(reply, &pos, 1); !errors.Is(err, errBadReply) {
			t.Errorf("%s: %v, want errBadReply", name, err)
		}
	}
}
