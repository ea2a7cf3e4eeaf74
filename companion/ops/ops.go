// Package ops holds the companion's heavy operations (full statistics,
// quantize, the recipe report, ...) as functions of a loaded checkpoint, a
// kernels.Backend and JSON parameters. The command line (`quantscope stats`,
// `quantscope quantize`, ...) and the websocket jobs (companion/jobs) call the
// same functions, so what the page shows and what the terminal prints agree.
//
// An Op registers itself by name in init(); jobs look it up with Lookup.
// It does not open sources, manage jobs or talk to clients.
package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/kernels"
)

// Env is what an operation runs against.
type Env struct {
	// Checkpoint is the source the job named, already loaded (headers read);
	// its ReadTensor reads tensor bytes from the source (local files, the HF
	// cache, or range requests).
	Checkpoint *checkpoint.Checkpoint
	// Backend runs the kernels.
	Backend kernels.Backend
	// Progress is told how far the operation has come; it does not block and
	// may be called from several goroutines (one call at a time is not promised).
	Progress kernels.Progress
	// WriteDir, when not empty, is the only folder under which an operation
	// may write a file its parameters ask for (`serve --out-dir`); empty
	// means such writes are refused and files come back as bytes.
	WriteDir string
	// Reads says which local files the operation may read when its
	// parameters name one; the zero value (the command line) allows any.
	Reads LocalReads
}

// Array is a bulk array of a result, sent to the page as a binary frame
// instead of JSON (histogram counts, value grids, error maps).
type Array struct {
	Name  string    // what it is, e.g. "histogram.counts"
	Shape []int     // row-major
	F32   []float32 // exactly one of F32, I64, U8 is set
	I64   []int64
	U8    []byte
}

// Result is an operation's answer: a JSON-able value (what `--json` prints on
// the command line) and, for the page, bulk arrays and files.
type Result struct {
	JSON   any
	Arrays []Array
	// Files are outputs (a quantized .safetensors); Path is set when written to
	// Env.WriteDir, else Data holds the bytes.
	Files []File
}

// File is one output file of an operation.
type File struct {
	Name string // suggested file name
	Path string // where it was written, when written
	Data []byte // the bytes, when not written
}

// Op runs one operation on one module of env.Checkpoint. params is the
// operation's JSON parameters (documented with each op); module names a
// module as `inspect --json` lists it. Errors name the module, the tensor and
// the rule, as the command line prints them.
type Op func(ctx context.Context, env Env, module string, params json.RawMessage) (*Result, error)

var (
	mu       sync.RWMutex
	registry = map[string]Op{}
)

// Register makes op available under name; registering a name twice panics
// (a programming error found at start-up).
func Register(name string, op Op) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("ops: %q registered twice", name))
	}
	registry[name] = op
}

// Lookup returns the op registered under name.
func Lookup(name string) (Op, bool) {
	mu.RLock()
	defer mu.RUnlock()
	op, ok := registry[name]
	return op, ok
}

// Names lists the registered operations, sorted (the companion's hello).
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DecodeParams unmarshals params into v, refusing unknown fields, with an
// error naming the operation.
func DecodeParams(op string, params json.RawMessage, v any) error {
	if len(params) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: parameters: %w", op, err)
	}
	return nil
}
