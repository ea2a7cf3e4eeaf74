//go:build js && wasm

// Package jsfetch is quantscope's bridge to the browser: a hub.Fetcher on
// the browser's fetch, and the few helpers (awaiting a Promise, making one)
// that the page's API needs. All JS access goes through safejs; callbacks
// never block, and every Func is released once its Promise has settled.
package jsfetch

import (
	"errors"
	"fmt"

	"github.com/hack-pad/safejs"
)

// Await waits for a Promise to settle. The callbacks only send on a buffered
// channel; they are released after the promise settles, never before, so a
// late settlement cannot call a released function.
func Await(p safejs.Value) (safejs.Value, error) {
	type result struct {
		v   safejs.Value
		err error
	}
	ch := make(chan result, 1)
	onOK, err := safejs.FuncOf(func(_ safejs.Value, args []safejs.Value) any {
		v := safejs.Undefined()
		if len(args) > 0 {
			v = args[0]
		}
		ch <- result{v: v}
		return nil
	})
	if err != nil {
		return safejs.Undefined(), err
	}
	onErr, err := safejs.FuncOf(func(_ safejs.Value, args []safejs.Value) any {
		e := errors.New("promise rejected")
		if len(args) > 0 {
			e = JSError(args[0])
		}
		ch <- result{err: e}
		return nil
	})
	if err != nil {
		onOK.Release()
		return safejs.Undefined(), err
	}
	if _, err := p.Call("then", onOK.Value(), onErr.Value()); err != nil {
		onOK.Release()
		onErr.Release()
		return safejs.Undefined(), err
	}
	r := <-ch
	onOK.Release()
	onErr.Release()
	return r.v, r.err
}

// JSError turns a thrown JS value into a Go error carrying its name and message.
func JSError(v safejs.Value) error {
	name, _ := getString(v, "name")
	msg, _ := getString(v, "message")
	if msg == "" {
		s, _ := v.String()
		msg = s
	}
	if name != "" {
		return fmt.Errorf("%s: %s", name, msg)
	}
	return errors.New(msg)
}

func getString(v safejs.Value, p string) (string, error) {
	if v.Type() != safejs.TypeObject {
		return "", errors.New("not an object")
	}
	x, err := v.Get(p)
	if err != nil || x.Type() != safejs.TypeString {
		return "", err
	}
	return x.String()
}

// NewPromise returns a Promise settled by run, which runs on its own
// goroutine: the JS caller is never blocked.
func NewPromise(run func() (any, error)) (safejs.Value, error) {
	var resolve, reject safejs.Value
	exec, err := safejs.FuncOf(func(_ safejs.Value, args []safejs.Value) any {
		resolve, reject = args[0], args[1]
		return nil
	})
	if err != nil {
		return safejs.Undefined(), err
	}
	ctor, err := safejs.Global().Get("Promise")
	if err != nil {
		exec.Release()
		return safejs.Undefined(), err
	}
	p, err := ctor.New(exec.Value()) // the executor runs synchronously
	exec.Release()
	if err != nil {
		return safejs.Undefined(), err
	}
	go func() {
		v, err := run()
		if err != nil {
			reject.Invoke(errorObject(err))
			return
		}
		resolve.Invoke(v)
	}()
	return p, nil
}

// ErrorFields lets an error add fields to the JS Error it becomes.
type ErrorFields interface {
	JSFields() map[string]any
}

func errorObject(err error) any {
	ctor, e := safejs.Global().Get("Error")
	if e != nil {
		return err.Error()
	}
	obj, e := ctor.New(err.Error())
	if e != nil {
		return err.Error()
	}
	var ef ErrorFields
	if errors.As(err, &ef) {
		for k, v := range ef.JSFields() {
			obj.Set(k, v)
		}
	}
	return obj
}

// BytesToJS copies bytes into a new Uint8Array in one bulk copy.
func BytesToJS(b []byte) (safejs.Value, error) {
	ctor, err := safejs.Global().Get("Uint8Array")
	if err != nil {
		return safejs.Undefined(), err
	}
	arr, err := ctor.New(len(b))
	if err != nil {
		return safejs.Undefined(), err
	}
	if _, err := safejs.CopyBytesToJS(arr, b); err != nil {
		return safejs.Undefined(), err
	}
	return arr, nil
}
