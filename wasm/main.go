//go:build js && wasm

// Command wasm is quantscope's page engine, compiled to WebAssembly. It
// puts one object on globalThis:
//
//	quantscope.open(source, {endpoint, revision, token, tokenHosts, onProgress, onTrace, bytes}) → Promise<inventory JSON>
//	  (with bytes: true, as UTF-8 in a Uint8Array)
//	quantscope.sample(module, rowStart, rows[, colStart]) → Promise<{json, values: Float32Array}>
//	quantscope.tensors([module]) → Promise<tensors[] JSON>  (the inventory leaves them out)
//	quantscope.fit({tp, context, batch, mtp, w4a, kv_dtype, reserve, gpus}) → Promise<fit --json's JSON>
//	quantscope.compare(source, {endpoint, revision, token, tokenHosts}) → Promise<diff JSON>  (the open repo against another)
//	quantscope.cancel()
//
// Opening another repo cancels what is in flight. Errors reject with an
// Error carrying kind, status, rule, tensor and file. The logic lives in
// wasm/session; this file only moves values across.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"runtime/debug"
	"sync"

	"github.com/hack-pad/safejs"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/wasm/jsfetch"
	"github.com/quantscope/quantscope/wasm/session"
)

// pageError is an error with the fields the page acts on.
type pageError struct{ info session.ErrorInfo }

func (e *pageError) Error() string { return e.info.Message }

func (e *pageError) JSFields() map[string]any {
	return map[string]any{"kind": e.info.Kind, "status": e.info.Status, "rule": e.info.Rule, "tensor": e.info.Tensor, "file": e.info.File}
}

func classify(err error) error { return &pageError{info: session.Classify(err)} }

type app struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	cur    *session.Session
	gen    int
}

func (a *app) open(args []safejs.Value) (any, error) {
	if len(args) < 1 {
		return nil, errors.New("open(source, options)")
	}
	source, err := args[0].String()
	if err != nil {
		return nil, err
	}
	opt := session.Options{Fetcher: jsfetch.Fetcher{}}
	var onProgress safejs.Value
	asBytes := false
	if len(args) > 1 && args[1].Type() == safejs.TypeObject {
		o := args[1]
		if v, err := o.Get("bytes"); err == nil && v.Type() == safejs.TypeBoolean {
			asBytes, _ = v.Bool()
		}
		opt.Endpoint = optString(o, "endpoint")
		opt.Revision = optString(o, "revision")
		opt.Token = optString(o, "token")
		opt.TokenHosts = optStrings(o, "tokenHosts")
		if f, err := o.Get("onProgress"); err == nil && f.Type() == safejs.TypeFunction {
			onProgress = f
		}
		if f, err := o.Get("onTrace"); err == nil && f.Type() == safejs.TypeFunction {
			opt.Trace = func(phase string) { f.Invoke(phase) }
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	if a.cancel != nil {
		a.cancel() // opening another repo cancels what is in flight
	}
	if a.cur != nil {
		a.cur.Close()
		a.cur = nil
	}
	a.cancel = cancel
	a.gen++
	gen := a.gen
	a.mu.Unlock()
	if onProgress.Type() == safejs.TypeFunction {
		opt.Progress = func(p checkpoint.Progress) {
			b, _ := json.Marshal(p)
			onProgress.Invoke(string(b))
		}
	}
	s, err := session.Open(ctx, source, opt)
	if err != nil {
		return nil, classify(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen { // replaced while it loaded
		s.Close()
		return nil, classify(context.Canceled)
	}
	a.cur = s
	b, err := s.InventoryJSON(false)
	if err != nil {
		return nil, err
	}
	if opt.Trace != nil {
		opt.Trace("inventory written")
	}
	if asBytes { // UTF-8 in a fresh buffer that the worker hands to the page without a copy
		return jsfetch.BytesToJS(b)
	}
	return string(b), nil
}

// tensors returns tensors[] as JSON: all of them, or one module's.
func (a *app) tensors(args []safejs.Value) (any, error) {
	a.mu.Lock()
	s := a.cur
	a.mu.Unlock()
	if s == nil {
		return nil, errors.New("no repo is open")
	}
	var b []byte
	var err error
	if len(args) > 0 && args[0].Type() == safejs.TypeString {
		name, _ := args[0].String()
		b, err = s.ModuleTensorsJSON(name)
	} else {
		b, err = s.TensorsJSON()
	}
	if err != nil {
		return nil, classify(err)
	}
	return string(b), nil
}

func optString(o safejs.Value, p string) string {
	v, err := o.Get(p)
	if err != nil || v.Type() != safejs.TypeString {
		return ""
	}
	s, _ := v.String()
	return s
}

// optStrings reads an array of strings; nil when the property is absent
// or not an array (its non-string items are skipped).
func optStrings(o safejs.Value, p string) []string {
	v, err := o.Get(p)
	if err != nil || v.Type() != safejs.TypeObject {
		return nil
	}
	n, err := v.Length()
	if err != nil {
		return nil
	}
	out := []string{}
	for i := range n {
		if x, err := v.Index(i); err == nil && x.Type() == safejs.TypeString {
			s, _ := x.String()
			out = append(out, s)
		}
	}
	return out
}

func (a *app) sample(args []safejs.Value) (any, error) {
	if len(args) < 3 {
		return nil, errors.New("sample(module, rowStart, rows)")
	}
	name, err := args[0].String()
	if err != nil {
		return nil, err
	}
	lo, err := args[1].Int()
	if err != nil {
		return nil, err
	}
	n, err := args[2].Int()
	if err != nil {
		return nil, err
	}
	c0 := 0
	if len(args) > 3 && args[3].Type() == safejs.TypeNumber {
		if c0, err = args[3].Int(); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	s := a.cur
	a.mu.Unlock()
	if s == nil {
		return nil, errors.New("no repo is open")
	}
	v, err := s.SampleWindow(name, lo, n, c0)
	if err != nil {
		return nil, classify(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 4*len(v.Values))
	for i, x := range v.Values {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	u8, err := jsfetch.BytesToJS(raw)
	if err != nil {
		return nil, err
	}
	buf, err := u8.Get("buffer")
	if err != nil {
		return nil, err
	}
	f32c, err := safejs.Global().Get("Float32Array")
	if err != nil {
		return nil, err
	}
	vals, err := f32c.New(buf)
	if err != nil {
		return nil, err
	}
	out, err := safejs.ValueOf(map[string]any{"json": string(js)})
	if err != nil {
		return nil, err
	}
	if err := out.Set("values", vals); err != nil {
		return nil, err
	}
	return out, nil
}

// fit estimates the memory to serve the open repo (session.FitJSON); its
// options object is fit's flags by name (session.FitRequest).
func (a *app) fit(args []safejs.Value) (any, error) {
	a.mu.Lock()
	s := a.cur
	a.mu.Unlock()
	if s == nil {
		return nil, errors.New("no repo is open")
	}
	var req []byte
	if len(args) > 0 && args[0].Type() == safejs.TypeObject {
		js, err := safejs.Global().Get("JSON")
		if err != nil {
			return nil, err
		}
		str, err := js.Call("stringify", args[0])
		if err != nil {
			return nil, err
		}
		v, err := str.String()
		if err != nil {
			return nil, err
		}
		req = []byte(v)
	}
	b, err := s.FitJSON(req)
	if err != nil {
		return nil, classify(err)
	}
	return string(b), nil
}

// compare reads another repo's headers and returns `quantscope diff --json`
// of the open repo (A) against it (B).
func (a *app) compare(args []safejs.Value) (any, error) {
	if len(args) < 1 {
		return nil, errors.New("compare(source, options)")
	}
	source, err := args[0].String()
	if err != nil {
		return nil, err
	}
	opt := session.Options{Fetcher: jsfetch.Fetcher{}}
	if len(args) > 1 && args[1].Type() == safejs.TypeObject {
		opt.Endpoint = optString(args[1], "endpoint")
		opt.Revision = optString(args[1], "revision")
		opt.Token = optString(args[1], "token")
		opt.TokenHosts = optStrings(args[1], "tokenHosts")
	}
	a.mu.Lock()
	s := a.cur
	a.mu.Unlock()
	if s == nil {
		return nil, errors.New("no repo is open")
	}
	b, err := s.Compare(context.Background(), source, opt)
	if err != nil {
		return nil, classify(err)
	}
	return string(b), nil
}

func (a *app) cancelAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
	a.gen++
}

func main() {
	a := &app{}
	// The engine's garbage is mostly header strings; collect less often.
	debug.SetGCPercent(400)
	api := map[string]func(args []safejs.Value) (any, error){"open": a.open, "sample": a.sample, "tensors": a.tensors, "fit": a.fit, "compare": a.compare}
	obj, err := safejs.ValueOf(map[string]any{"version": "quantscope-wasm-1"})
	if err != nil {
		return
	}
	var funcs []safejs.Func // kept for the life of the page; the program never exits
	for name, fn := range api {
		f, err := safejs.FuncOf(func(_ safejs.Value, args []safejs.Value) any {
			p, err := jsfetch.NewPromise(func() (any, error) { return fn(args) })
			if err != nil {
				return nil
			}
			return p
		})
		if err != nil {
			return
		}
		funcs = append(funcs, f)
		obj.Set(name, f.Value())
	}
	cancel, err := safejs.FuncOf(func(safejs.Value, []safejs.Value) any { go a.cancelAll(); return nil })
	if err != nil {
		return
	}
	funcs = append(funcs, cancel)
	obj.Set("cancel", cancel.Value())
	safejs.Global().Set("quantscope", obj)
	if ready, err := safejs.Global().Get("quantscopeReady"); err == nil && ready.Type() == safejs.TypeFunction {
		ready.Invoke()
	}
	// While the user types a repo's name, or while a deep link's listing
	// and index are on their way, run the engine's hot code once on a small
	// repo of its own (session.WarmUp): the browser then has it optimised
	// when the real headers arrive. A call that comes meanwhile runs
	// between its steps (one thread, goroutines).
	go session.WarmUp()
	select {} // serve calls until the page goes away
}
