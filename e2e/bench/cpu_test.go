package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSample is the CPU seconds (user + system) used so far by the test
// process (the load generator and the in-process operator) and by each of
// its child processes (kube-apiserver, etcd), keyed by the command name.
type cpuSample map[string]float64

// sampleCPU reads /proc. On a system without it (not Linux) the sample is
// empty and the cells report no CPU figure.
func sampleCPU() cpuSample {
	s := cpuSample{}
	self := os.Getpid()
	if c, _, ok := procStat(strconv.Itoa(self)); ok {
		s["bench+operator"] = c
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid := filepath.Base(d)
		c, st, ok := procStat(pid)
		if !ok || st.ppid != self {
			continue
		}
		s[st.comm] += c
	}
	return s
}

type procInfo struct {
	comm string
	ppid int
}

// procStat parses /proc/<pid>/stat: the command (between parentheses), the
// parent pid (field 4) and utime + stime (fields 14 and 15) in seconds.
func procStat(pid string) (float64, procInfo, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, procInfo{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, procInfo{}, false
	}
	f := strings.Fields(s[end+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, procInfo{}, false
	}
	return (ut + st) / clockTicks, procInfo{comm: s[open+1 : end], ppid: ppid}, true
}

// perOp is the CPU milliseconds per operation each process used between
// two samples.
func (after cpuSample) perOp(before cpuSample, ops int) map[string]float64 {
	if ops == 0 || len(after) == 0 {
		return nil
	}
	out := map[string]float64{}
	total := 0.0
	for k, v := range after {
		d := (v - before[k]) * 1000 / float64(ops)
		out[k] = d
		total += d
	}
	out["total"] = total
	return out
}

// minus is the CPU seconds each process used between before and after.
func (after cpuSample) minus(before cpuSample) cpuSample {
	out := cpuSample{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}
