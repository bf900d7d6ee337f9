package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is CPU time (user + system) spent so far by this process and by the database
// servers' processes. On two shared cores, CPU per message is what a loopback benchmark
// measures: it shows where the time goes when round trips cost almost nothing.
type cpuTimes struct {
	self, server time.Duration
}

// serverCommands are the process names whose CPU counts as the database server's.
var serverCommands = map[string]bool{"postgres": true, "mariadbd": true, "mysqld": true}

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

func readCPU() cpuTimes {
	var t cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		t.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15, counted after ")".
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || !serverCommands[s[open+1:end]] {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		t.server += time.Duration(utime+stime) * clockTick
	}
	return t
}
