//go:build ignore

// gen writes the Lua constants of the algorithm table (algo.Lua) to the
// file named by its argument.
package main

import (
	"log"
	"os"

	"github.com/sluicehq/sluice/internal/algo"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go run gen.go FILE")
	}
	if err := os.WriteFile(os.Args[1], []byte(algo.Lua()), 0o644); err != nil {
		log.Fatal(err)
	}
}
