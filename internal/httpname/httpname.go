// Package httpname validates the names HTTP carries as tokens: header and
// cookie names, methods. Every package that accepts one, from
// configuration or from a client, asks Valid, so that one rule and one
// length bound hold everywhere.
package httpname

import "golang.org/x/net/http/httpguts"

// MaxLen is the longest name Valid accepts, in bytes. Real header names
// are far shorter; the bound keeps a name a client sends from growing a
// key, a log line or a header table.
const MaxLen = 128

// Valid reports whether s is an HTTP token (RFC 9110: letters, digits and
// !#$%&'*+-.^_`|~) of 1 to MaxLen bytes.
func Valid(s string) bool {
	return len(s) <= MaxLen && httpguts.ValidHeaderFieldName(s)
}
