package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func joinComma(s []string) string               { return strings.Join(s, ",") }
func contains(s, sub string) bool               { return strings.Contains(s, sub) }

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}
