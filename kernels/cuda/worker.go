package cuda

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// Timeouts of the worker's life; variables so that tests can shorten them.
var (
	// HelloTimeout bounds the wait for the hello (context creation and the
	// PTX's JIT compilation take a few seconds on a cold driver).
	HelloTimeout = 60 * time.Second
	// StopGrace is how long a worker whose stdin was closed may take to exit
	// before it is killed.
	StopGrace = 2 * time.Second
)

// maxResponse bounds a response's payload (the largest result a job asks for).
const maxResponse = 64 << 30

// NoGPUError is a worker that did not start speaking the protocol: it was
// missing, printed something else first (gorgonia.org/cu's cuInit failure
// message), or exited.
type NoGPUError struct {
	Path, Reason string
}

func (e *NoGPUError) Error() string {
	return fmt.Sprintf("cuda worker %s: no usable GPU: %s", e.Path, e.Reason)
}

// Worker is one running worker process, owning one GPU.
type Worker struct {
	Hello wire.Hello
	path  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	errs  *tail
	done  chan struct{} // closed when the process has exited

	mu   sync.Mutex // one request at a time
	id   uint64
	dead error // why the worker can no longer be used
}

// StartWorker starts the worker at path for GPU device and reads its hello.
func StartWorker(path string, device int) (*Worker, error) {
	cmd := exec.Command(path, "-device", strconv.Itoa(device))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &Worker{path: path, cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20), errs: &tail{max: 4096}, done: make(chan struct{})}
	cmd.Stderr = w.errs
	if err := cmd.Start(); err != nil {
		return nil, &NoGPUError{Path: path, Reason: err.Error()}
	}
	go func() { cmd.Wait(); close(w.done) }()

	type first struct {
		h   []byte
		err error
	}
	ch := make(chan first, 1)
	go func() {
		h, _, err := wire.Read(w.out, 1<<16)
		ch <- first{h, err}
	}()
	var f first
	select {
	case f = <-ch:
	case <-time.After(HelloTimeout):
		w.kill()
		return nil, &NoGPUError{Path: path, Reason: fmt.Sprintf("no hello within %v", HelloTimeout)}
	}
	if f.err != nil {
		var nf *wire.NotFrameError
		reason := f.err.Error()
		if errors.As(f.err, &nf) || f.err == io.EOF {
			// what it printed instead: the rest of the line, briefly
			got := ""
			if nf != nil {
				got = string(nf.Got)
			}
			line := make(chan string, 1)
			go func() { s, _ := w.out.ReadString('\n'); line <- s }()
			select {
			case s := <-line:
				got += s
			case <-time.After(time.Second):
			}
			reason = "it printed " + strconv.Quote(strings.TrimSpace(got)) + " instead of a hello"
			if got == "" {
				reason = "it exited before its hello"
			}
		}
		w.kill()
		if e := strings.TrimSpace(w.errs.String()); e != "" {
			reason += " (stderr: " + e + ")"
		}
		return nil, &NoGPUError{Path: path, Reason: reason}
	}
	if err := json.Unmarshal(f.h, &w.Hello); err != nil || w.Hello.Op != wire.OpHello {
		w.kill()
		return nil, &NoGPUError{Path: path, Reason: fmt.Sprintf("its first frame is not a hello: %.200s", f.h)}
	}
	if w.Hello.Version != wire.Version {
		w.kill()
		return nil, &NoGPUError{Path: path, Reason: fmt.Sprintf("it speaks protocol %d, this build %d (rebuild it with make cuda)", w.Hello.Version, wire.Version)}
	}
	return w, nil
}

// Call sends one request and waits for its response. When ctx ends first,
// the worker is stopped (stdin closed, then killed after StopGrace) and
// ctx's error returned; when the worker dies, the error says so and the
// worker is unusable (Dead).
func (w *Worker) Call(ctx context.Context, req wire.Request, parts ...[]byte) (wire.Response, [][]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead != nil {
		return wire.Response{}, nil, w.dead
	}
	w.id++
	req.ID = w.id
	req.Parts = wire.Lens(parts...)
	type result struct {
		resp  wire.Response
		parts [][]byte
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		if err := wire.Write(w.stdin, req, parts...); err != nil {
			ch <- result{err: err}
			return
		}
		h, p, err := wire.Read(w.out, maxResponse)
		if err != nil {
			ch <- result{err: err}
			return
		}
		var r result
		if r.err = json.Unmarshal(h, &r.resp); r.err == nil {
			if r.resp.ID != req.ID {
				r.err = fmt.Errorf("response %d to request %d", r.resp.ID, req.ID)
			} else {
				r.parts, r.err = wire.Split(p, r.resp.Parts)
			}
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			w.kill()
			<-w.done
			msg := r.err.Error()
			if e := strings.TrimSpace(w.errs.String()); e != "" {
				msg += "; stderr: " + e
			}
			w.dead = fmt.Errorf("cuda worker %s died during %s: %s (%s)", w.path, req.Op, msg, w.cmd.ProcessState)
			return wire.Response{}, nil, w.dead
		}
		if r.resp.Error != "" {
			return r.resp, nil, fmt.Errorf("cuda %s: %s", req.Op, r.resp.Error)
		}
		return r.resp, r.parts, nil
	case <-ctx.Done():
		w.stop()
		w.dead = fmt.Errorf("cuda worker %s: stopped when %s was cancelled", w.path, req.Op)
		return wire.Response{}, nil, ctx.Err()
	}
}

// Dead says why the worker can no longer be used (nil while it can).
func (w *Worker) Dead() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// Close stops the worker: stdin closed (it exits at the end of its input),
// killed if it has not exited after StopGrace.
func (w *Worker) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop()
	if w.dead == nil {
		w.dead = errors.New("cuda worker closed")
	}
}

func (w *Worker) stop() {
	w.stdin.Close()
	select {
	case <-w.done:
	case <-time.After(StopGrace):
		w.kill()
		<-w.done
	}
}

func (w *Worker) kill() {
	w.stdin.Close()
	w.cmd.Process.Kill()
}

// tail keeps the last max bytes written to it (the worker's stderr).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
