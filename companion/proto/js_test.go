package proto

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// The page parses binary frames in JavaScript (web/companion.js); this runs
// that parser under node on frames written by EncodeFrame (and on broken
// ones) and checks it reads exactly what ParseFrame reads.
func TestJSParserAgreesWithGo(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not found (CI installs it)")
		}
		t.Skip("node not on PATH: the page's frame parser was not checked")
	}
	var frames [][]byte
	enc := func(f Frame) {
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	enc(Frame{ID: "j1", Name: "histogram.counts", DType: I64, Shape: []int{4}, Data: I64Data([]int64{0, 1, -7, math.MaxInt64})})
	enc(Frame{ID: "job-22", Name: "values", DType: F32, Shape: []int{2, 3}, Data: F32Data([]float32{1.5, -2, 3e-39, 65504, 0.1, -0})})
	enc(Frame{ID: "é", Name: "grid", DType: F64, Shape: []int{1, 1, 2}, Data: func() []byte {
		b := make([]byte, 16)
		for i, v := range []float64{math.Pi, -1e300} {
			u := math.Float64bits(v)
			for k := range 8 {
				b[8*i+k] = byte(u >> (8 * k))
			}
		}
		return b
	}()})
	enc(Frame{ID: "j", Name: "codes", DType: I32, Shape: []int{2}, Data: []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}})
	enc(Frame{ID: "j", Name: "file:q.safetensors", DType: U8, Shape: []int{5}, Data: []byte("hello")})
	enc(Frame{ID: "j", Name: "empty", DType: F32, Shape: []int{0, 7}, Data: nil})
	enc(Frame{ID: "j", Name: "scalar", DType: U8, Shape: []int{}, Data: []byte{42}})
	good := len(frames)
	frames = append(frames,
		plainFrame("j", "a", 1, []uint32{2}, make([]byte, 7)),
		plainFrame("j", "a", 1, []uint32{2}, make([]byte, 9)),
		plainFrame("j", "a", 9, []uint32{2}, make([]byte, 8)),
		plainFrame("", "a", 1, []uint32{2}, make([]byte, 8)),
		plainFrame("j", "\xff", 1, []uint32{2}, make([]byte, 8)),
		plainFrame("j", "a", 1, []uint32{math.MaxUint32, math.MaxUint32, math.MaxUint32}, make([]byte, 8)),
		plainFrame("j", "a", 5, make([]uint32, 9), nil),
		[]byte("QSB\x01\x01\x00\x01\x00\x01\x00ja"),
		[]byte("QSA\x01"),
		func() []byte { b := plainFrame("j", "ab", 1, []uint32{2}, make([]byte, 8)); b[20] = 1; return b }(),
	)
	dir := t.TempDir()
	in := filepath.Join(dir, "frames.json")
	b, _ := json.Marshal(frames) // []byte as base64
	os.WriteFile(in, b, 0o644)
	script := filepath.Join(dir, "run.js")
	// Read through os so that go test's cache knows the test depends on it.
	src, err := os.ReadFile("../../web/companion.js")
	if err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(dir, "companion.js")
	os.WriteFile(js, src, 0o644)
	os.WriteFile(script, []byte(`
const { parseFrame } = require(`+jsString(js)+`);
const frames = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const out = frames.map(b64 => {
  const bytes = Buffer.from(b64, "base64");
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  try {
    const f = parseFrame(buf);
    const raw = Buffer.from(f.data.buffer, f.data.byteOffset, f.data.byteLength);
    const values = f.dtype === "i64" ? Array.from(f.data, String) : Array.from(f.data);
    return { ok: true, id: f.id, name: f.name, dtype: f.dtype, shape: f.shape, kind: f.data.constructor.name, n: f.data.length, raw: raw.toString("base64"), values };
  } catch (e) { return { ok: false, err: String(e.message) }; }
});
console.log(JSON.stringify(out));
`), 0o644)
	cmd := exec.Command(node, script, in)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, outb)
	}
	var got []struct {
		OK                    bool
		Err                   string
		ID, Name, DType, Kind string
		Shape                 []int
		N                     int
		Raw                   []byte
		Values                []json.RawMessage
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("%v: %s", err, outb)
	}
	kinds := map[DType]string{F32: "Float32Array", F64: "Float64Array", I32: "Int32Array", I64: "BigInt64Array", U8: "Uint8Array"}
	for i, b := range frames {
		f, err := ParseFrame(b)
		g := got[i]
		if (err == nil) != g.OK || (i < good) != g.OK {
			t.Errorf("frame %d: Go says %v, JS says ok=%v %s", i, err, g.OK, g.Err)
			continue
		}
		if err != nil {
			continue
		}
		if g.ID != f.ID || g.Name != f.Name || g.DType != f.DType.String() || !reflect.DeepEqual(g.Shape, f.Shape) || g.Kind != kinds[f.DType] ||
			string(g.Raw) != string(f.Data) || g.N != len(f.Data)/f.DType.Size() {
			t.Errorf("frame %d: JS read %+v, Go %+v", i, g, f)
		}
		// Element values, as numbers (i64 as decimal strings).
		switch f.DType {
		case F32:
			v, _ := f.Float32s()
			for k, x := range v {
				var y float64
				json.Unmarshal(g.Values[k], &y)
				if float64(x) != y {
					t.Errorf("frame %d value %d: JS %v, Go %v", i, k, y, x)
				}
			}
		case I64:
			v, _ := f.Int64s()
			for k, x := range v {
				var s string
				json.Unmarshal(g.Values[k], &s)
				if s != jsonInt(x) {
					t.Errorf("frame %d value %d: JS %s, Go %d", i, k, s, x)
				}
			}
		}
	}
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

func jsonInt(x int64) string { b, _ := json.Marshal(x); return string(b) }
