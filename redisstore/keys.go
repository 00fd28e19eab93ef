package redisstore

import (
	"strconv"

	"github.com/sluicehq/sluice"
)

// stateKeys returns the Redis keys of r's key (its Key and Slot) under
// its Limit: the state hash and the log (used by sliding_log and
// concurrency). It is the only place keys are built.
//
// Every user-supplied part is length-prefixed, so two different (slot,
// key, limit) triples never produce the same name, whatever bytes they
// contain: "a:b"+"c" and "a"+"b:c" stay apart. Of the limit, only what
// identifies its state is in the name, its algorithm and version (see
// sluice.Limit.Shares): the other parameters are stored in the hash (field
// p) and a state written under others is carried over (scripts/adopt.lua),
// so a changed limit keeps its keys' usage. The hash tag {…} holds what
// chooses the slot, so both keys of a request, and with Config.Slots every
// key of one Slot, live on one Redis Cluster slot:
//
//	<prefix>{<len>:<key>}<algorithm>/v<version>:s                (default: Slot ignored)
//	<prefix>{<len>:<slot>}<len>:<key>/<algorithm>/v<version>:s   (Config.Slots; <slot> is the Key when Slot is empty)
//
// These names are the state in Redis: changing them starts every count
// afresh (TestKeyNames holds them).
func (s *Store) stateKeys(r *sluice.Request) (state, log string) {
	return s.keysWith(r, limitName(r.Limit), true)
}

// limitName is the part of a key naming the limit's state:
// <algorithm>/v<version>.
func limitName(lim sluice.Limit) string {
	return lim.Algorithm.String() + "/v" + strconv.FormatUint(uint64(lim.Version), 10)
}

// keysWith is stateKeys with the limit's name already built (compile
// caches it); the log key only if withLog.
func (s *Store) keysWith(r *sluice.Request, limit string, withLog bool) (state, log string) {
	var buf [128]byte // on the stack: a usual key costs one allocation, its string
	return keysFrom(s.appendState(buf[:0], r, limit), withLog)
}

// keysFrom returns the state key state (appendState's bytes) as a string,
// and the log key beside it if withLog, from one allocation.
func keysFrom(state []byte, withLog bool) (string, string) {
	if !withLog {
		return string(state), ""
	}
	n := len(state) - len(":s")
	all := string(append(state, ":l"...))
	return all[:n+2], all[:n] + all[n+2:]
}

// appendState appends the state key of r's key under the limit named limit
// to b: keysWith's state, as bytes, for a lookup that builds no string.
func (s *Store) appendState(b []byte, r *sluice.Request, limit string) []byte {
	b = append(b, s.prefix...)
	b = append(b, '{')
	if s.slots {
		slot := r.Slot
		if slot == "" {
			slot = r.Key
		}
		b = appendPart(b, slot)
		b = append(b, '}')
		b = appendPart(b, r.Key)
		b = append(b, '/')
	} else {
		b = appendPart(b, r.Key)
		b = append(b, '}')
	}
	b = append(b, limit...)
	return append(b, ":s"...)
}

// appendPart appends <len>:<v>.
func appendPart(b []byte, v string) []byte {
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	return append(b, v...)
}

// slot returns the Redis Cluster hash slot of a key built by stateKeys: the
// CRC16 (XMODEM) of its hash tag, modulo 16384.
func slot(key string) uint16 {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
