package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of utime/stime in /proc/PID/stat. It is 100 on every Linux
// architecture Go supports (the kernel's USER_HZ, not CONFIG_HZ).
const userHZ = 100

// memStatus is a process's resident memory as /proc/PID/status reports it.
type memStatus struct {
	RSS  int64 // VmRSS, bytes
	HWM  int64 // VmHWM (peak RSS since start or the last resetPeak), bytes
	Anon int64 // RssAnon: private memory (heap, stacks), bytes
	File int64 // RssFile: mapped file pages, mostly the binary's code and read-only data
}

// readMem reads VmRSS and VmHWM of pid ("self" or a number).
func readMem(pid string) (memStatus, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return memStatus{}, err
	}
	var m memStatus
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.HWM
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(val) // "12345 kB"
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("/proc/%s/status: %s: %w", pid, key, err)
		}
		*dst = kb << 10
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("/proc/%s/status has no VmRSS", pid)
	}
	return m, nil
}

// resetPeak resets VmHWM to the current RSS (Linux clear_refs "5"), so that a later
// VmHWM is the peak of what came after. It reports whether that worked.
func resetPeak(pid string) bool {
	return os.WriteFile("/proc/"+pid+"/clear_refs", []byte("5"), 0) == nil
}

// readCPU reads the user+system CPU time of process pid, threads that ended included,
// from /proc/PID/stat (10 ms resolution).
func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

func parseStatCPU(b []byte) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may hold spaces: fields are
	// counted from the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("/proc/PID/stat: too few fields")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// selfCPU is this process's user+system CPU time (getrusage, microsecond resolution).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
