//go:build amd64 || arm64 || loong64 || ppc64 || ppc64le || riscv64 || s390x || mips64 || mips64le || wasm

package memstore

import (
	"testing"
	"unsafe"
)

// The entry's layout is planned for 64-bit pointers; on a 32-bit platform
// it is smaller and this test does not apply.

// TestEntryLayout: an entry is two whole cache lines, its lock and what
// finding it reads in the first, its state in the second (see entry).
func TestEntryLayout(t *testing.T) {
	var e entry
	if got := unsafe.Sizeof(e); got != 128 {
		t.Errorf("entry is %d bytes, want 128 (two cache lines)", got)
	}
	if got := unsafe.Offsetof(e.st); got != 64 {
		t.Errorf("entry.st at offset %d, want 64 (the second cache line)", got)
	}
	if got := unsafe.Offsetof(e.kbuf) + unsafe.Sizeof(e.kbuf); got > 64 {
		t.Errorf("entry's first line ends at %d, want at most 64", got)
	}
}
