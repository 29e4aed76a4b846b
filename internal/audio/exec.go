package audio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"gateway/internal/childproc"
)

// DefaultToolTimeout bounds one ffmpeg/ffprobe run when the caller's ctx allows longer.
// Decoding a few minutes of speech takes well under a second; this is a backstop.
const DefaultToolTimeout = 2 * time.Minute

// stderrTail is how much of a program's stderr an error quotes.
const stderrTail = 1024

// ErrOutputTooLarge is returned when a program writes more to stdout than allowed.
var ErrOutputTooLarge = errors.New("output too large")

// RunError is a program that failed: it could not start, exited non-zero or timed out.
type RunError struct {
	Program  string
	ExitCode int // -1 when it did not exit on its own
	TimedOut bool
	Stderr   string // the last part of its stderr, trimmed
	Err      error
}

func (e *RunError) Error() string {
	var b strings.Builder
	b.WriteString(e.Program)
	switch {
	case e.TimedOut:
		b.WriteString(": timed out")
	case e.ExitCode >= 0:
		fmt.Fprintf(&b, ": exit status %d", e.ExitCode)
	default:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

func (e *RunError) Unwrap() error { return e.Err }

// Cmd describes one run of a program. The argument list goes to the program as is:
// there is never a shell in between.
type Cmd struct {
	Argv      []string
	Stdin     io.Reader
	Timeout   time.Duration // 0: DefaultToolTimeout
	MaxStdout int64         // 0: stdout is discarded; beyond it, Run returns ErrOutputTooLarge
}

// Run runs c under ctx and returns its stdout. The program gets a minimal environment
// (childproc.BaseEnv: locale, home, search path), never the gateway's secrets. It and its
// children are killed when ctx ends or the timeout passes; stdout beyond MaxStdout is
// dropped (the program is left to finish) and reported as ErrOutputTooLarge.
func Run(ctx context.Context, c Cmd) ([]byte, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("no program to run")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultToolTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	// The environment a hook program gets: ffmpeg needs nothing more, and an admin's speech
	// command must not see the gateway's tokens and keys, which it runs beside.
	cmd.Env = childproc.BaseEnv()
	childproc.OwnGroup(cmd) // cancellation kills what a wrapper script started too
	stdout := &limitBuffer{max: c.MaxStdout}
	stderr := &childproc.Tail{Max: stderrTail}
	// The result is read as soon as the program exits: what a wrapper script left running
	// in the background, holding its stdout, is killed then, not waited for.
	err := childproc.RunPiped(cmd, c.Stdin, stdout, stderr)
	if err != nil {
		re := &RunError{Program: c.Argv[0], ExitCode: -1, Stderr: oneLine(stderr), Err: err}
		var ee *exec.ExitError
		if ctx.Err() != nil {
			re.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			re.Err = ctx.Err()
		} else if errors.As(err, &ee) {
			re.ExitCode = ee.ExitCode()
		}
		return nil, re
	}
	if stdout.over {
		return stdout.buf.Bytes(), fmt.Errorf("%s: %w (more than %d bytes)", c.Argv[0], ErrOutputTooLarge, c.MaxStdout)
	}
	return stdout.buf.Bytes(), nil
}

// limitBuffer keeps up to max bytes and drops the rest, remembering that it did.
type limitBuffer struct {
	buf  bytes.Buffer
	max  int64
	over bool
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	room := l.max - int64(l.buf.Len())
	if room <= 0 {
		if len(p) > 0 && l.max > 0 {
			l.over = true
		}
		return len(p), nil
	}
	if int64(len(p)) > room {
		l.buf.Write(p[:room])
		l.over = true
		return len(p), nil
	}
	l.buf.Write(p)
	return len(p), nil
}

// oneLine is a program's stderr tail as an error quotes it: valid UTF-8, on one line.
func oneLine(t *childproc.Tail) string {
	return strings.Join(strings.Fields(strings.ToValidUTF8(t.String(), "")), " ")
}
