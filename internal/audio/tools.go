package audio

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
)

// CheckTools reports every named program that cannot be found on PATH, with the Debian
// package that provides it.
func CheckTools(names ...string) error {
	var errs []error
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			errs = append(errs, missingTool(name))
		}
	}
	return errors.Join(errs...)
}

func missingTool(name string) error {
	if pkg := debianPackage(filepath.Base(name)); pkg != "" {
		return fmt.Errorf("program %q not found on PATH (on Debian/Ubuntu: apt-get install %s)", name, pkg)
	}
	return fmt.Errorf("program %q not found on PATH (or not executable)", name)
}

// debianPackage names the package that ships a program we know of.
func debianPackage(program string) string {
	switch program {
	case "ffmpeg", "ffprobe":
		return "ffmpeg"
	case "opusenc", "opusdec", "opusinfo":
		return "opus-tools"
	case "espeak-ng":
		return "espeak-ng"
	case "pdftotext":
		return "poppler-utils"
	case "espeak":
		return "espeak"
	case "pocketsphinx_continuous", "pocketsphinx_batch", "pocketsphinx":
		return "pocketsphinx pocketsphinx-en-us"
	case "flite":
		return "flite"
	case "sox":
		return "sox"
	}
	return ""
}
