package childproc

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// pipeGrace bounds the wait for a program's pipes to close once it has exited and its
// group was killed: only a process that left the group (setsid) can still hold them.
const pipeGrace = time.Second

// RunPiped runs cmd (through Run) with stdin, when not nil, on its standard input and its
// output copied to stdout and stderr, and kills its process group as soon as it exits
// (call OwnGroup first). The pipes are the caller's own rather than exec's, whose Wait waits
// for every process holding them: a background process the program left with its stdout
// would hold up the result until WaitDelay and turn a program that exited 0 into an error.
// cmd's Stdin, Stdout and Stderr are set here.
func RunPiped(cmd *exec.Cmd, stdin io.Reader, stdout, stderr io.Writer) error {
	var files []*os.File // every end, closed on the way out
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	defer func() { closeAll(files...) }()
	outR, outW, err := pipe()
	if err != nil {
		return err
	}
	errR, errW, err := pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	ours := []*os.File{outR, errR} // closed at the grace's end to unblock the copies
	var wg sync.WaitGroup
	var inR *os.File
	if stdin != nil {
		var inW *os.File
		if inR, inW, err = pipe(); err != nil {
			return err
		}
		cmd.Stdin = inR
		ours = append(ours, inW)
		wg.Go(func() {
			_, _ = io.Copy(inW, stdin) // EPIPE: the program did not read it all, which is its right
			_ = inW.Close()
		})
	}
	wg.Go(func() { _, _ = io.Copy(stdout, outR) })
	wg.Go(func() { _, _ = io.Copy(stderr, errR) })

	err = Run(cmd)
	if cmd.Process != nil {
		KillGroup(cmd.Process.Pid) // whatever it left running in the background
	}
	closeAll(inR, outW, errW) // the program's ends: once its group is gone, the copies see EOF
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeGrace):
		closeAll(ours...) // what the program wrote before it exited was read by now
		<-done
	}
	return err
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
