package shed

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// CPUReader reports CPU usage: the CPU time used so far (by a cgroup or
// a process) and how many CPUs it may use. ok is false when the usage
// cannot be read.
type CPUReader func() (used time.Duration, cpus float64, ok bool)

// ReadCPU reads the CPU usage of this process's cgroup (cgroup v2:
// cpu.stat's usage_usec, with cpu.max's quota as the CPUs it may use), or,
// without one, of the process itself (/proc/self/stat, with GOMAXPROCS as
// the CPUs). ok is false where neither can be read (outside Linux).
func ReadCPU() (used time.Duration, cpus float64, ok bool) {
	if used, cpus, ok = readCgroupCPU("/sys/fs/cgroup"); ok {
		return used, cpus, true
	}
	return readProcCPU("/proc/self/stat")
}

// readCgroupCPU reads a cgroup v2 directory's cpu.stat and cpu.max.
func readCgroupCPU(dir string) (time.Duration, float64, bool) {
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, 0, false
	}
	var usec int64 = -1
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
			usec, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, false
			}
		}
	}
	if usec < 0 {
		return 0, 0, false
	}
	cpus := float64(runtime.GOMAXPROCS(0))
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		f := strings.Fields(string(b)) // "max 100000" or "200000 100000"
		if len(f) == 2 && f[0] != "max" {
			quota, err1 := strconv.ParseFloat(f[0], 64)
			period, err2 := strconv.ParseFloat(f[1], 64)
			if err1 == nil && err2 == nil && quota > 0 && period > 0 {
				cpus = min(cpus, quota/period)
			}
		}
	}
	return time.Duration(usec) * time.Microsecond, cpus, true
}

// readProcCPU reads a process's utime and stime from its stat file, in
// clock ticks of 1/100 s (USER_HZ on Linux).
func readProcCPU(path string) (time.Duration, float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')') // the command may hold spaces and parentheses
	if i < 0 || i+2 > len(b) {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // fields 14 and 15 of stat
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, float64(runtime.GOMAXPROCS(0)), true
}

// cpuGate measures CPU usage between reads at least cpuInterval apart.
type cpuGate struct {
	read     CPUReader
	off      bool // usage cannot be read: the limit alone decides
	lastAt   time.Time
	lastUsed time.Duration
	usage    float64 // -1 until measured, and while off
	lastShed time.Time
}

const cpuInterval = 250 * time.Millisecond

// busy reports whether shedding may happen: while CPU usage is at least
// threshold, and for a second after a request was shed; always while the
// gate is off. Until a second read measures usage it is not busy. l.mu is
// held.
func (g *cpuGate) busy(now time.Time, threshold float64) bool {
	if g.lastAt.IsZero() || now.Sub(g.lastAt) >= cpuInterval {
		used, cpus, ok := g.read()
		switch {
		case !ok || cpus <= 0:
			g.off, g.usage = true, -1
		case !g.lastAt.IsZero() && !g.off:
			g.usage = float64(used-g.lastUsed) / float64(now.Sub(g.lastAt)) / cpus
		default:
			g.off = false // the first reading: nothing measured yet
		}
		g.lastAt, g.lastUsed = now, used
	}
	return g.off || g.usage >= threshold || now.Sub(g.lastShed) < time.Second
}
