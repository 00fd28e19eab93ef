package redisstore

import "time"

// SkewLocalClock moves s's local clock by d, as if its host's clock were
// wrong by that much (it is monotonic, so only a jump moves it).
func SkewLocalClock(s *Store, d time.Duration) { s.skew.Store(int64(d)) }
