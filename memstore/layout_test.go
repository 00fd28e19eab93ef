//go:build amd64 || arm64 || loong64 || ppc64 || ppc64le || riscv64 || s390x || mips64 || mips64le || wasm

package memstore

import (
	"testing"
	"unsafe"
)

// The entry's layout is planned for 64-bit pointers; on a 32-bit platform
// it is smaller and this test does not apply.

// TestEntryLayout: an entry is two whole cache lines; its lock, what
// finding it reads for a key of up to headKey bytes, and the state of the
// buckets and the fixed window on the first (see entry).
func TestEntryLayout(t *testing.T) {
	var e entry
	if got := unsafe.Sizeof(e); got != 128 {
		t.Errorf("entry is %d bytes, want 128 (two cache lines)", got)
	}
	first := map[string]uintptr{
		"mu": unsafe.Offsetof(e.mu), "shut": unsafe.Offsetof(e.shut) + 7, "c": unsafe.Offsetof(e.c) + 7,
		"klen": unsafe.Offsetof(e.klen), "used": unsafe.Offsetof(e.used), "dead": unsafe.Offsetof(e.dead),
		"head":    unsafe.Offsetof(e.head) + headKey - 1,
		"st.X":    unsafe.Offsetof(e.st) + unsafe.Offsetof(e.st.X) + 7,
		"st.Y":    unsafe.Offsetof(e.st) + unsafe.Offsetof(e.st.Y) + 7,
		"st.Idle": unsafe.Offsetof(e.st) + unsafe.Offsetof(e.st.Idle) + 7,
	}
	for name, end := range first {
		if end >= 64 {
			t.Errorf("entry.%s ends at byte %d, past the first cache line", name, end)
		}
	}
}
