package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
)

// The Lua sources: one file per algorithm, a shared library and state
// handling, and one entry point per job. Each entry script is the library,
// every algorithm and state.lua, followed by its own body, so that one
// EVALSHA can decide requests under different algorithms atomically.
//
//go:embed scripts/*.lua
var sources embed.FS

var libraryFiles = []string{
	"lib.lua", "fixed_window.lua", "sliding_window.lua", "sliding_log.lua",
	"bucket.lua", "warm_up.lua", "concurrency.lua", "state.lua",
}

// script is one assembled Lua script and its SHA1, for EVALSHA.
type script struct {
	name string
	src  string
	sha  string
}

func assemble(entry string) *script {
	var b strings.Builder
	for _, f := range append(libraryFiles, entry) {
		src, err := sources.ReadFile("scripts/" + f)
		if err != nil {
			panic("redisstore: missing embedded script " + f) // a build defect, caught by every test
		}
		b.WriteString("-- ")
		b.WriteString(f)
		b.WriteString("\n")
		b.Write(src)
		b.WriteString("\n")
	}
	sum := sha1.Sum([]byte(b.String()))
	return &script{name: entry, src: b.String(), sha: hex.EncodeToString(sum[:])}
}

var (
	takeScript    = assemble("take.lua")
	refundScript  = assemble("refund.lua")
	releaseScript = assemble("release.lua")
	allScripts    = []*script{takeScript, refundScript, releaseScript}
)
