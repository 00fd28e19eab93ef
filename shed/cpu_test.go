package shed

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestCPUGate: at a full limit of 2, with a CPU threshold of 80%, a
// request is admitted while usage is under it, shed once usage reaches it,
// and shed while less than a second has passed since the last request
// shed, even when usage falls.
func TestCPUGate(t *testing.T) {
	now := time.Unix(0, 0)
	var used time.Duration // CPU time; 1 CPU
	l := newLimiter(t, Config{InitialLimit: 2, MinLimit: 2, CriticalWait: -1, CPUThreshold: 0.8,
		Now: func() time.Time { return now },
		CPU: func() (time.Duration, float64, bool) { return used, 1, true },
	})
	acquire := func() error {
		_, err := l.Acquire(context.Background(), Default)
		return err
	}
	acquire()
	acquire()
	if err := acquire(); err != nil || l.Stats().CPU != -1 { // the first read measures nothing yet
		t.Fatalf("beyond the limit before CPU usage is measured: %v, want admitted", err)
	}
	step := func(d time.Duration, usage float64) {
		now = now.Add(d)
		used += time.Duration(float64(d) * usage)
	}
	step(time.Second, 0.5)
	if err := acquire(); err != nil || l.Stats().CPU != 0.5 {
		t.Fatalf("at 50%% CPU: %v, stats %+v; want admitted beyond the limit", err, l.Stats())
	}
	step(time.Second, 0.9)
	if err := acquire(); !errors.Is(err, ErrShed) {
		t.Fatalf("at 90%% CPU: %v, want ErrShed", err)
	}
	step(500*time.Millisecond, 0.1)
	if err := acquire(); !errors.Is(err, ErrShed) {
		t.Fatalf("at 10%% CPU half a second after shedding: %v, want ErrShed", err)
	}
	step(1100*time.Millisecond, 0.1)
	if err := acquire(); err != nil {
		t.Fatalf("at 10%% CPU 1.1s after the last shedding: %v, want admitted", err)
	}
}

func TestCPUGateOffWhenUnreadable(t *testing.T) {
	l := newLimiter(t, Config{InitialLimit: 1, MinLimit: 1, CriticalWait: -1, CPUThreshold: 0.5,
		CPU: func() (time.Duration, float64, bool) { return 0, 0, false }})
	l.Acquire(context.Background(), Default)
	if _, err := l.Acquire(context.Background(), Default); !errors.Is(err, ErrShed) || l.Stats().CPU != -1 {
		t.Fatalf("unreadable CPU: %v, CPU %v; want the limit to decide, -1", err, l.Stats().CPU)
	}
	if _, err := New(Config{CPUThreshold: 1.5}); err == nil {
		t.Fatal("CPUThreshold 1.5 accepted")
	}
}

func TestReadCPUFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := readCgroupCPU(dir); ok {
		t.Fatal("a directory without cpu.stat read as a cgroup")
	}
	write("cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
	write("cpu.max", "50000 100000\n")
	if used, cpus, ok := readCgroupCPU(dir); !ok || used != 1500*time.Millisecond || cpus != min(0.5, float64(runtime.GOMAXPROCS(0))) {
		t.Fatalf("cgroup with a quota: %v %v %v", used, cpus, ok)
	}
	write("cpu.max", "max 100000\n")
	if _, cpus, ok := readCgroupCPU(dir); !ok || cpus != float64(runtime.GOMAXPROCS(0)) {
		t.Fatalf("cgroup without a quota: %v CPUs, want GOMAXPROCS", cpus)
	}
	write("cpu.stat", "usage_usec lots\n")
	if _, _, ok := readCgroupCPU(dir); ok {
		t.Fatal("a malformed cpu.stat was read")
	}
	write("stat", "4711 (my (odd) cmd) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0\n")
	if used, _, ok := readProcCPU(filepath.Join(dir, "stat")); !ok || used != 3*time.Second {
		t.Fatalf("proc stat: %v %v, want 3s", used, ok)
	}
	write("stat", "4711 (cmd) S 1 2")
	if _, _, ok := readProcCPU(filepath.Join(dir, "stat")); ok {
		t.Fatal("a short stat was read")
	}
	if runtime.GOOS == "linux" {
		if _, _, ok := ReadCPU(); !ok {
			t.Error("ReadCPU cannot read this Linux machine's usage")
		}
	}
}
