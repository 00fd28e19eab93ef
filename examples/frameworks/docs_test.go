package frameworks_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/doccheck"
)

// TestGoGuideChi builds the programs of docs/go.md that import chi, which
// only this module requires (the sluice module builds the others:
// internal/doccheck).
func TestGoGuideChi(t *testing.T) {
	doccheck.BuildFile(t, ".", "../../docs/go.md", func(p doccheck.Program) bool {
		return p.Imports("github.com/go-chi/chi/v5")
	})
}
