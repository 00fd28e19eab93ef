package memstore
import ("testing";"time";"github.com/sluicehq/sluice";"github.com/sluicehq/sluice/internal/algo")
func BenchmarkZTake(b *testing.B){
 for _, res := range []time.Duration{0, time.Millisecond} {
 b.Run(res.String(), func(b *testing.B){
 s,_ := New(Config{Resolution: res}); defer s.Close()
 r := sluice.Request{Key: "user:100000", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000), Cost: 1}
 s.Take(ctx, r)
 b.ResetTimer()
 for range b.N { s.Take(ctx, r) }
 })}
}
func BenchmarkZStep(b *testing.B){
 p,_ := algo.Compile(sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000))
 var st algo.State
 now := int64(1_700_000_000_000_000)
 for i := range b.N { algo.Step(&p, &st, now+int64(i), 1, 0, true) }
}
func BenchmarkZClock(b *testing.B){
 s,_ := New(Config{}); defer s.Close()
 var x int64
 for range b.N { x += s.now() }
 _ = x
}
