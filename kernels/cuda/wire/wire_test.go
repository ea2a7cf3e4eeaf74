package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	h := Hello{Op: OpHello, Version: Version, Name: "NVIDIA H200", TotalMem: 150 << 30, FreeMem: 140 << 30, Major: 9}
	if err := Write(&buf, h); err != nil {
		t.Fatal(err)
	}
	req := Request{Op: OpDequantFP8, ID: 7, Rows: 2, Cols: 3, Parts: []int64{3, 0, 2}}
	if err := Write(&buf, req, []byte("abc"), nil, []byte("de")); err != nil {
		t.Fatal(err)
	}
	hb, pl, err := Read(&buf, 1<<20)
	if err != nil || len(pl) != 0 {
		t.Fatalf("hello: %v, payload %q", err, pl)
	}
	var got Hello
	if err := json.Unmarshal(hb, &got); err != nil || got != h {
		t.Fatalf("hello %+v (%v), want %+v", got, err, h)
	}
	hb, pl, err = Read(&buf, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var r Request
	if err := json.Unmarshal(hb, &r); err != nil || r.ID != 7 || r.Op != OpDequantFP8 {
		t.Fatalf("request %+v (%v)", r, err)
	}
	parts, err := Split(pl, r.Parts)
	if err != nil || string(parts[0]) != "abc" || len(parts[1]) != 0 || string(parts[2]) != "de" {
		t.Fatalf("parts %q (%v)", parts, err)
	}
	if _, _, err := Read(&buf, 1<<20); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

// TestNotFrame: a worker whose cuInit failed prints text; the client must
// see that text, not a frame.
func TestNotFrame(t *testing.T) {
	msg := "Error in initialization, please refer to ..."
	_, _, err := Read(strings.NewReader(msg), 1<<20)
	var nf *NotFrameError
	if !errors.As(err, &nf) || string(nf.Got) != "Erro" {
		t.Fatalf("got %v, want a NotFrameError with the first bytes", err)
	}
	_, _, err = Read(strings.NewReader("QS"), 1<<20)
	if !errors.As(err, &nf) || string(nf.Got) != "QS" {
		t.Fatalf("short input: %v", err)
	}
}

func TestLimits(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, Request{Op: OpInfo}, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(bytes.NewReader(buf.Bytes()), 99); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("payload over the limit: %v", err)
	}
	if _, _, err := Read(bytes.NewReader(buf.Bytes()[:buf.Len()-1]), 100); err == nil || !strings.Contains(err.Error(), "truncated payload") {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := Split(make([]byte, 5), []int64{2, 2}); err == nil {
		t.Fatal("Split accepted parts short of the payload")
	}
	if _, err := Split(make([]byte, 5), []int64{6, -1}); err == nil {
		t.Fatal("Split accepted a negative part")
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	Write(&buf, Request{Op: OpW4AFP8, Parts: []int64{1, 2}}, []byte{1}, []byte{2, 3})
	f.Add(buf.Bytes())
	f.Add([]byte("QSW1\xff\xff\xff\xff"))
	f.Add([]byte("hello"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := Read(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		if len(h) > MaxHeader || len(p) > 1<<16 {
			t.Fatalf("frame over the limits: %d, %d", len(h), len(p))
		}
		var r Request
		if json.Unmarshal(h, &r) == nil {
			Split(p, r.Parts)
		}
	})
}
