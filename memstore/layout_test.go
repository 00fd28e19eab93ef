//go:build amd64 || arm64 || loong64 || ppc64 || ppc64le || riscv64 || s390x || mips64 || mips64le || wasm

package memstore

import (
	"testing"
	"unsafe"
)

// The entry's layout is planned for 64-bit pointers; on a 32-bit platform
// it is smaller and this test does not apply.

// TestEntryLayout: an entry is one whole cache line (a table's slot).
func TestEntryLayout(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 64 {
		t.Errorf("entry is %d bytes, want 64 (one cache line)", got)
	}
}
