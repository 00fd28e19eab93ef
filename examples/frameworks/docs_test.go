package frameworks_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/doccheck"
)

// TestGoGuideChi builds the programs of docs/go.md that import chi, which
// only this module requires (the sluice module builds the others:
// internal/doccheck).
func TestGoGuideChi(t *testing.T) {
	b, err := os.ReadFile("../../docs/go.md")
	if err != nil {
		t.Fatal(err)
	}
	progs, err := doccheck.Programs(string(b))
	if err != nil {
		t.Fatalf("docs/go.md: %v", err)
	}
	var chi []doccheck.Program
	for _, p := range progs {
		if p.Imports("github.com/go-chi/chi/v5") {
			chi = append(chi, p)
		}
	}
	doccheck.Build(t, ".", "docs/go.md", chi)
}
