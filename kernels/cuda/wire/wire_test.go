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

func TestServe(t *testing.T) {
	var in, out bytes.Buffer
	Write(&in, Request{Op: OpInfo, ID: 1})
	Write(&in, Request{Op: OpDequantMXFP4, ID: 2, Parts: []int64{16, 1}}, make([]byte, 16), []byte{127})
	Write(&in, Request{Op: OpDequantMXFP4, ID: 3, Parts: []int64{16, 2}}, make([]byte, 16), []byte{127, 1})
	Write(&in, Request{Op: "nope", ID: 4})
	var seen []string
	err := Serve(&in, &out, Hello{Name: "dev"}, func(req Request, parts [][]byte) (Response, [][]byte, error) {
		seen = append(seen, req.Op)
		if req.Op == OpInfo {
			return Response{FreeMem: 5}, nil, nil
		}
		return Response{}, [][]byte{make([]byte, 128)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("handler saw %v; the bad requests must not reach it", seen)
	}
	var h Hello
	hb, _, _ := Read(&out, 1<<20)
	if json.Unmarshal(hb, &h); h.Op != OpHello || h.Version != Version || h.Name != "dev" {
		t.Fatalf("hello %+v", h)
	}
	for id := uint64(1); id <= 4; id++ {
		hb, p, err := Read(&out, 1<<20)
		var r Response
		if err != nil || json.Unmarshal(hb, &r) != nil || r.ID != id {
			t.Fatalf("response %d: %s %v", id, hb, err)
		}
		switch id {
		case 1:
			if r.FreeMem != 5 {
				t.Errorf("info: %+v", r)
			}
		case 2:
			if r.Error != "" || len(p) != 128 || len(r.Parts) != 1 {
				t.Errorf("dequant: %+v, %d bytes", r, len(p))
			}
		case 3:
			if !strings.Contains(r.Error, "part 1 holds 2 bytes, want 1") {
				t.Errorf("wrong scale count: %+v", r)
			}
		case 4:
			if !strings.Contains(r.Error, `unknown operation "nope"`) {
				t.Errorf("unknown op: %+v", r)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	bad := []struct {
		req   Request
		parts [][]byte
	}{
		{Request{Op: OpDequantFP8, Rows: 2, Cols: 4, R: 1, C: 4}, [][]byte{make([]byte, 8), make([]byte, 4)}}, // 2 scales needed
		{Request{Op: OpDequantFP8, Rows: 2, Cols: 4, R: 0, C: 4}, [][]byte{make([]byte, 8), make([]byte, 8)}}, // R = 0
		{Request{Op: OpQuantNVFP4, Rows: 1, Cols: 8, Recipe: "max", Global: 1}, [][]byte{make([]byte, 32)}},   // not 16-blocks
		{Request{Op: OpQuantNVFP4, Rows: 1, Cols: 16, Recipe: "four_six", Global: 1}, [][]byte{make([]byte, 64)}},
		{Request{Op: OpQuantNVFP4, Rows: 1, Cols: 16, Recipe: "max", Global: 0}, [][]byte{make([]byte, 64)}},
		{Request{Op: OpW4AFP8, T: 1, K: 64, N: 1}, [][]byte{make([]byte, 64), make([]byte, 4), make([]byte, 32), make([]byte, 0)}},
		{Request{Op: OpDequantNVFP4}, [][]byte{make([]byte, 7), make([]byte, 1)}},
	}
	for i, c := range bad {
		if err := Check(c.req, c.parts); err == nil {
			t.Errorf("case %d (%s) accepted", i, c.req.Op)
		}
	}
	ok := Check(Request{Op: OpDequantFP8, Rows: 3, Cols: 5, R: 2, C: 4}, [][]byte{make([]byte, 15), make([]byte, 4*2*2)})
	if ok != nil {
		t.Errorf("a ragged block grid: %v", ok)
	}
	if err := Check(Request{Op: OpW4AFP8, T: 2, K: 128, N: 3}, [][]byte{make([]byte, 256), make([]byte, 8), make([]byte, 192), make([]byte, 12)}); err != nil {
		t.Errorf("w4a: %v", err)
	}
}
