package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"

	"gateway/internal/childproc"
)

// execRunner runs a hook program: the event as JSON on stdin, the result as JSON on stdout.
// The program never runs through a shell and message text never reaches its arguments.
type execRunner struct {
	name   string
	source string
	dir    string
	argv   []string
	env    []string
	apiEnv func() []string // api: true; nil otherwise
	log    *slog.Logger
}

func newExecRunner(s hookSpec, log *slog.Logger) *execRunner {
	// API keys and platform tokens stay out unless HOOK.yaml lists them under env.
	env := append([]string{"GATEWAY_HOOK_NAME=" + s.Name, "GATEWAY_HOOK_DIR=" + s.Dir}, childproc.BaseEnv(s.env...)...)
	return &execRunner{name: s.Name, source: s.Source, dir: s.Dir, argv: s.command, env: env, log: log}
}

func (x *execRunner) invoke(ctx context.Context, event string, body []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, x.argv[0], x.argv[1:]...)
	cmd.Dir = x.dir
	cmd.Env = append(x.env[:len(x.env):len(x.env)], "GATEWAY_HOOK_EVENT="+event)
	if x.apiEnv != nil {
		cmd.Env = append(cmd.Env, x.apiEnv()...)
	}
	stdout := &capBuffer{max: maxOutput}
	stderr := &childproc.Tail{Max: maxStderr}
	childproc.OwnGroup(cmd) // at timeout the whole group is killed, not only the program
	// Its answer is heard as soon as it exits, whatever it left running (which is killed).
	err := childproc.RunPiped(cmd, bytes.NewReader(body), stdout, stderr)
	if ctx.Err() != nil {
		reason := "its program was stopped"
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			reason = "its program timed out"
		}
		return nil, &Failure{reason, fmt.Errorf("hook %q: stopped (%v); its processes were killed%s", x.name, context.Cause(ctx), stderrSuffix(stderr))}
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() >= 0 {
				return nil, &Failure{fmt.Sprintf("its program exited with status %d", ee.ExitCode()),
					fmt.Errorf("hook %q exited with code %d%s", x.name, ee.ExitCode(), stderrSuffix(stderr))}
			}
			return nil, &Failure{"its program crashed (" + ee.String() + ")", fmt.Errorf("hook %q: %s%s", x.name, ee.String(), stderrSuffix(stderr))}
		}
		return nil, &Failure{"its program could not be started", fmt.Errorf("hook %q: %w", x.name, err)}
	}
	if stdout.over {
		msg := fmt.Sprintf("wrote more than %d KiB to stdout", maxOutput>>10)
		return nil, &Failure{"its program " + msg, fmt.Errorf("hook %q %s", x.name, msg)}
	}
	// stderr is the program's diagnostics, the admin's to read: a failure quotes it, and so
	// does this line when the program succeeded.
	if msg := strings.TrimSpace(strings.ToValidUTF8(stderr.String(), "?")); msg != "" {
		x.log.Info("hook wrote to stderr", "source", x.source, "event", event, "stderr", msg)
	}
	return stdout.buf.Bytes(), nil
}

// capBuffer keeps the first max bytes and notes that more came.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		c.over = true
		return len(p), nil // keep draining, so the program is not stuck on a full pipe
	}
	return c.buf.Write(p)
}

// stderrSuffix is "; stderr: <its tail>" for an error message, or "" when stderr was empty.
func stderrSuffix(t *childproc.Tail) string {
	s := strings.TrimSpace(strings.ToValidUTF8(t.String(), "?"))
	if s == "" {
		return ""
	}
	return "; stderr: " + s
}
