// Package nginxparity holds no code, only a test: it runs a real nginx with
// limit_req, drives it with bursts and sustained overload, and replays the
// arrival times nginx recorded into sluice's leaky_bucket on a fake clock,
// requiring nginx's decision (PASSED, DELAYED, REJECTED) for every request.
//
// The test needs the nginx binary (Debian's nginx package; scripts/test
// installs it). Without it the test skips, or fails when CI=true.
package nginxparity
