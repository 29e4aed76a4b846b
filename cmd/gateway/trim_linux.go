//go:build linux

package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// madvPageout is Linux's MADV_PAGEOUT (5.4 and later): reclaim these pages now.
const madvPageout = 21

// releaseStartupPages drops the pages of the gateway's own binary (code and read-only
// data) that are mapped now, once start-up is over. Start-up runs much code that the
// message path never runs again (package initialisation, config decoding, SDK and client
// set-up), and those clean pages stayed in the process's RSS: about 20 of the 27 MiB at
// ready were the binary's pages. Whatever is still needed comes back on first use, from
// the page cache or the disk. Pages another process maps too (a second gateway on the
// same binary) are left alone by the kernel. Best effort: errors are ignored (older
// kernels refuse MADV_PAGEOUT, and nothing is lost then).
func releaseStartupPages() {
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return
	}
	st, ok := exe.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Contains(fields[1], "w") || fields[4] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), madvPageout)
	}
}
