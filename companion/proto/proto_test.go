package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestMessagesRoundTrip(t *testing.T) {
	msgs := []Message{
		Hello{Protocol: Version, Program: "devel", Backends: []string{"cpu (2 cores)"}, CPUCores: 2, GPUs: []GPU{}, Ops: []string{"inventory"},
			Limits: Limits{MaxMessageBytes: 1 << 18, MaxJobs: 4, MaxJobsTotal: 8}},
		Submit{ID: "j1", Op: "stats", Source: "org/name", Revision: "main", Endpoint: "http://127.0.0.1:1", Module: "m", Params: json.RawMessage(`{"bins":64}`)},
		Progress{ID: "j1", Phase: "headers", Done: 3, Total: 80, ElapsedMS: 120, Note: "read from the Hugging Face cache at /x"},
		Result{ID: "j1", JSON: json.RawMessage(`{"a":1}`), Arrays: []ArrayDesc{{Name: "h", DType: "f32", Shape: []int{2, 3}}}, ElapsedMS: 5},
		Error{ID: "j1", Code: CodeFailed, Message: "boom", Rule: "offsets", Tensor: "w", File: "a.safetensors"},
		Cancel{ID: "j1"},
	}
	for _, m := range msgs {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ Type string }
		if err := json.Unmarshal(b, &head); err != nil || head.Type != m.msgType() {
			t.Fatalf("%s: type field %q in %s", m.msgType(), head.Type, b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %#v\nwant %#v", got, m)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for in, want := range map[string]string{
		`[]`:                                 "not a JSON object",
		`{"id":"x"}`:                         `no "type"`,
		`{"type":"launch","id":"x"}`:         "unknown message type",
		`{"type":"cancel","id":"x","zap":1}`: "unknown field",
		`{"type":"cancel","id":"x"} {}`:      "not a JSON object",
		`{"type":"submit","id":5}`:           "submit",
		`{"type":"cancel","id":"x"`:          "not a JSON object",
	} {
		_, err := Decode([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

func TestSubmitCheck(t *testing.T) {
	ok := Submit{ID: "a", Op: "inventory", Source: "o/n"}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Submit{{Op: "x", Source: "s"}, {ID: "a", Source: "s"}, {ID: "a", Op: "x"}, {ID: strings.Repeat("i", MaxIDLen+1), Op: "x", Source: "s"}} {
		if s.Check() == nil {
			t.Errorf("%+v passed Check", s)
		}
	}
}

// plainFrame writes a frame from the layout in the package comment, byte by
// byte, independently of EncodeFrame.
func plainFrame(id, name string, dtype byte, shape []uint32, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString("QSA\x01")
	b.WriteByte(dtype)
	b.WriteByte(byte(len(shape)))
	binary.Write(&b, binary.LittleEndian, uint16(len(id)))
	binary.Write(&b, binary.LittleEndian, uint16(len(name)))
	for _, d := range shape {
		binary.Write(&b, binary.LittleEndian, d)
	}
	b.WriteString(id)
	b.WriteString(name)
	for b.Len()%8 != 0 {
		b.WriteByte(0)
	}
	b.Write(data)
	return b.Bytes()
}

func TestFrameLayout(t *testing.T) {
	vals := []float32{1, -2.5, float32(math.Inf(1)), 0, 3, 1e-40}
	f := Frame{ID: "job-7", Name: "histogram.counts", DType: F32, Shape: []int{2, 3}, Data: F32Data(vals)}
	b, err := EncodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	want := plainFrame("job-7", "histogram.counts", 1, []uint32{2, 3}, F32Data(vals))
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", b, want)
	}
	if (len(b)-len(f.Data))%8 != 0 {
		t.Fatalf("data starts at %d, not 8-aligned", len(b)-len(f.Data))
	}
	g, err := ParseFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := g.Float32s()
	if g.ID != f.ID || g.Name != f.Name || !reflect.DeepEqual(g.Shape, f.Shape) || !reflect.DeepEqual(back, vals) {
		t.Fatalf("parsed %+v %v", g, back)
	}
	i64 := Frame{ID: "j", Name: "counts", DType: I64, Shape: []int{3}, Data: I64Data([]int64{-1, 0, math.MaxInt64})}
	b, _ = EncodeFrame(i64)
	g, err = ParseFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Int64s(); !reflect.DeepEqual(v, []int64{-1, 0, math.MaxInt64}) {
		t.Fatalf("i64 %v", v)
	}
	scalar := Frame{ID: "j", Name: "s", DType: U8, Shape: []int{}, Data: []byte{9}}
	if b, err = EncodeFrame(scalar); err != nil {
		t.Fatal(err)
	}
	if g, err = ParseFrame(b); err != nil || len(g.Data) != 1 || g.Data[0] != 9 {
		t.Fatalf("scalar %+v %v", g, err)
	}
}

func TestFrameRefuses(t *testing.T) {
	good := plainFrame("j", "a", 1, []uint32{2}, make([]byte, 8))
	cases := map[string][]byte{
		"short":            good[:5],
		"bad magic":        append([]byte("QSB\x01"), good[4:]...),
		"unknown dtype":    plainFrame("j", "a", 9, []uint32{2}, make([]byte, 8)),
		"too few data":     good[:len(good)-1],
		"too much data":    append(append([]byte{}, good...), 0),
		"empty id":         plainFrame("", "a", 1, []uint32{2}, make([]byte, 8)),
		"empty name":       plainFrame("j", "", 1, []uint32{2}, make([]byte, 8)),
		"not UTF-8":        plainFrame("j", "\xff", 1, []uint32{2}, make([]byte, 8)),
		"huge shape":       plainFrame("j", "a", 1, []uint32{math.MaxUint32, math.MaxUint32, math.MaxUint32}, make([]byte, 8)),
		"too many dims":    plainFrame("j", "a", 5, make([]uint32, 9), nil),
		"name past end":    good[:12],
		"padding not zero": func() []byte { b := plainFrame("j", "ab", 1, []uint32{2}, make([]byte, 8)); b[20] = 1; return b }(),
	}
	for what, b := range cases {
		if f, err := ParseFrame(b); err == nil {
			t.Errorf("%s: parsed %+v", what, f)
		}
	}
	if _, err := EncodeFrame(Frame{ID: "j", Name: "a", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}); err == nil {
		t.Error("EncodeFrame took data that does not fit its shape")
	}
}

// FuzzParseFrame: no input panics or allocates beyond its size, and every
// frame that parses encodes back to the same bytes.
func FuzzParseFrame(f *testing.F) {
	f.Add(plainFrame("j", "a", 1, []uint32{2}, make([]byte, 8)))
	f.Add(plainFrame("job-1", "values", 4, []uint32{1, 2, 0}, nil))
	f.Add(plainFrame("j", "s", 5, nil, []byte{7}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			return
		}
		out, err := EncodeFrame(fr)
		if err != nil {
			t.Fatalf("parsed but does not encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoded differs:\n%x\n%x", out, b)
		}
	})
}
