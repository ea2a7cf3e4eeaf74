package ops

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestRegistryAndParams(t *testing.T) {
	Register("test-echo", func(ctx context.Context, env Env, module string, params json.RawMessage) (*Result, error) {
		return &Result{JSON: module}, nil
	})
	if _, ok := Lookup("test-echo"); !ok {
		t.Fatal("registered op not found")
	}
	if _, ok := Lookup("nope"); ok {
		t.Fatal("unregistered op found")
	}
	var p struct{ Bins int }
	if err := DecodeParams("stats", json.RawMessage(`{"Bins":3,"x":1}`), &p); err == nil || !strings.Contains(err.Error(), "stats: parameters") {
		t.Fatalf("unknown field: err = %v, want a stats: parameters error", err)
	}
	if err := DecodeParams("stats", json.RawMessage(`{"Bins":3}`), &p); err != nil || p.Bins != 3 {
		t.Fatalf("DecodeParams = %v, %+v", err, p)
	}
}
