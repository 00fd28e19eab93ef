package yamlload

import (
	"errors"
	"fmt"
	"testing"
)

// TestEach: the errors Collect finds, one a line, without the wrapping
// error's prefix; the error itself when it holds none.
func TestJoinCollected(t *testing.T) {
	a, b := &SyntaxError{Msg: "a"}, &SyntaxError{Msg: "b"}
	err := fmt.Errorf("policy: invalid: %w", errors.Join(a, b))
	if got := Join(err, Collect[*SyntaxError](err)); got.Error() != a.Error()+"\n"+b.Error() {
		t.Errorf("%q", got)
	}
	plain := errors.New("open x: no such file")
	if got := Join(plain, Collect[*SyntaxError](plain)); got != plain {
		t.Errorf("%v", got)
	}
}
