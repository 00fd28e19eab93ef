package httpname_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/httpname"
)

// TestValid: an RFC 9110 token of 1 to MaxLen bytes, nothing else.
func TestValid(t *testing.T) {
	for _, s := range []string{"X-Cost", "GET", "a", "!#$%&'*+-.^_`|~09azAZ", strings.Repeat("x", httpname.MaxLen)} {
		if !httpname.Valid(s) {
			t.Errorf("Valid(%q) = false", s)
		}
	}
	for _, s := range []string{"", "X Cost", "X-Cost:", "a\x00", "a\x7f", "é", `a"b`, "(a)", "a/b", "a{b}", strings.Repeat("x", httpname.MaxLen+1)} {
		if httpname.Valid(s) {
			t.Errorf("Valid(%q) = true", s)
		}
	}
	for c := 0; c < 256; c++ {
		want := c > ' ' && c < 0x7f && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(c))
		if got := httpname.Valid(string([]byte{byte(c)})); got != want {
			t.Errorf("Valid(%q) = %t, want %t", rune(c), got, want)
		}
	}
}
