package hooks

import "errors"

// Failure is why a hook's program or URL gave no usable answer. Its Error is the whole story
// for the admin's log: the end of the program's stderr, the start of an error page, what was
// wrong with the output. Reason says what happened in plain words and quotes nothing the hook
// wrote, so it alone may leave the gateway (a tool's result goes to the model, an outside
// provider): stderr is the admin's channel and may hold paths, environment dumps, tokens.
type Failure struct {
	Reason string // e.g. "its program exited with status 3", "its program timed out"
	Err    error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// FailureReason is the plain words of the *Failure in err, or "it failed" for any other
// error, whose text is never shown outside either.
func FailureReason(err error) string {
	var f *Failure
	if errors.As(err, &f) && f.Reason != "" {
		return f.Reason
	}
	return "it failed"
}
