//go:build !linux

package main

// releaseStartupPages is Linux-only (see trim_linux.go).
func releaseStartupPages() {}
