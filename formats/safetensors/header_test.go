package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// raw builds a file from literal header JSON and a data section of n bytes.
func raw(js string, n int) []byte {
	b := make([]byte, 8, 8+len(js)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	b = append(b, js...)
	return append(b, make([]byte, n)...)
}

// cardData holds the int4 codes -8..7 as pack_to_int32 stores them (code + 8).
var cardData = []byte{0x98, 0xba, 0xdc, 0xfe, 0x10, 0x32, 0x54, 0x76}

func TestFormatCardExample(t *testing.T) {
	data, err := Encode([]WriteTensor{{Name: "ct.weight_packed", DType: I32, Shape: []uint64{2, 1}, Data: cardData}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 88 {
		t.Fatalf("file is %d bytes, the format card's example is 88", len(data))
	}
	if n := binary.LittleEndian.Uint64(data); n != 72 {
		t.Fatalf("header length %d, want 72 (71 bytes of JSON padded with spaces)", n)
	}
	if data[8+71] != ' ' {
		t.Fatalf("padding byte is %q, want a space", data[8+71])
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "small-ct.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(golden, data) {
		t.Fatalf("writer output differs from testdata/small-ct.safetensors")
	}
	h, err := Parse("small-ct.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	tt, ok := h.Lookup("ct.weight_packed")
	if !ok || tt.DType != I32 || tt.Elements() != 2 || tt.NBytes() != 8 || h.DataStart() != 80 {
		t.Fatalf("parsed %+v, data start %d", tt, h.DataStart())
	}
}

func TestRoundTrip(t *testing.T) {
	in := []WriteTensor{
		{Name: "a.weight", DType: F4, Shape: []uint64{2, 4}, Data: []byte{1, 2, 3, 4}},
		{Name: "a.weight_scale", DType: F8_E4M3, Shape: []uint64{2, 1}, Data: []byte{0x38, 0x40}},
		{Name: "a.weight_scale_2", DType: F32, Shape: []uint64{}, Data: []byte{0, 0, 0x80, 0x3f}},
		{Name: "empty", DType: BF16, Shape: []uint64{2, 0}, Data: nil},
		{Name: "ünïcode \"quoted\"", DType: C64, Shape: []uint64{1}, Data: make([]byte, 8)},
	}
	data, err := Encode(in, map[string]string{"format": "pt", "x": "a\nb"})
	if err != nil {
		t.Fatal(err)
	}
	if (binary.LittleEndian.Uint64(data))%8 != 0 {
		t.Fatal("header not padded to a multiple of 8")
	}
	h, err := Read(bytes.NewReader(data), int64(len(data)), "rt.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["format"] != "pt" || h.Metadata["x"] != "a\nb" {
		t.Fatalf("metadata %v", h.Metadata)
	}
	if len(h.Tensors) != len(in) {
		t.Fatalf("%d tensors", len(h.Tensors))
	}
	for _, w := range in {
		got, ok := h.Lookup(w.Name)
		if !ok {
			t.Fatalf("missing %q", w.Name)
		}
		sec := make([]byte, got.NBytes())
		if _, err := h.Section(bytes.NewReader(data), got).ReadAt(sec, 0); err != nil && len(sec) > 0 {
			t.Fatal(err)
		}
		if !bytes.Equal(sec, w.Data) && len(w.Data) > 0 {
			t.Fatalf("%s: data %v, want %v", w.Name, sec, w.Data)
		}
		if got.DType != w.DType || len(got.Shape) != len(w.Shape) {
			t.Fatalf("%s: %v %v", w.Name, got.DType, got.Shape)
		}
	}
}

func TestDTypeBits(t *testing.T) {
	want := map[string]uint64{"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8,
		"F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16,
		"U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
		"F64": 64, "C64": 64}
	if len(DTypes()) != 22 || len(want) != 22 {
		t.Fatalf("%d dtypes", len(DTypes()))
	}
	for name, bits := range want {
		d, ok := ParseDType(name)
		if !ok || d.Bits() != bits || d.String() != name {
			t.Errorf("%s: %v %d", name, ok, d.Bits())
		}
	}
	if _, ok := ParseDType("f32"); ok {
		t.Error("dtype names are case-sensitive")
	}
}

func TestRules(t *testing.T) {
	const e = `"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	cases := []struct {
		name, rule, tensor string
		file               []byte
	}{
		{"short file", RuleHeaderLength, "", []byte{1, 0, 0}},
		{"zero length", RuleHeaderLength, "", make([]byte, 16)},
		{"huge length", RuleHeaderTooBig, "", func() []byte {
			b := make([]byte, 64)
			binary.LittleEndian.PutUint64(b, 90_000_000_000)
			return b
		}()},
		{"length past end", RuleHeaderBounds, "", func() []byte {
			b := make([]byte, 64*1024)
			binary.LittleEndian.PutUint64(b, 90_000_000)
			return b
		}()},
		{"not utf8", RuleUTF8, "", raw("{\"\xff\":1}", 0)},
		{"not an object", RuleJSON, "", raw(`[1,2]   `, 0)},
		{"trailing", RuleTrailing, "", raw(`{`+e+`} x`, 8)},
		{"two objects", RuleTrailing, "", raw(`{`+e+`}{}`, 8)},
		{"metadata not map", RuleMetadata, "", raw(`{"__metadata__":{"a":1},`+e+`}`, 8)},
		{"metadata array", RuleMetadata, "", raw(`{"__metadata__":[],`+e+`}`, 8)},
		{"metadata twice", RuleDuplicateKey, "", raw(`{"__metadata__":{},"__metadata__":{},`+e+`}`, 8)},
		{"entry not object", RuleEntry, "t", raw(`{"t":3}`, 0)},
		{"unknown field", RuleEntry, "t", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, 8)},
		{"missing shape", RuleEntry, "t", raw(`{"t":{"dtype":"F32","data_offsets":[0,8]}}`, 8)},
		{"bad dtype", RuleDType, "t", raw(`{"t":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}}`, 8)},
		{"negative dim", RuleShape, "t", raw(`{"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, 8)},
		{"fraction dim", RuleShape, "t", raw(`{"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, 8)},
		{"dim too big", RuleShape, "t", raw(`{"t":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`, 8)},
		{"three offsets", RuleOffsets, "t", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}`, 8)},
		{"end before begin", RuleOffsets, "t", raw(`{"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, 8)},
		{"overflow", RuleSizeOverflow, "t", raw(`{"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8)},
		{"bits overflow", RuleSizeOverflow, "t", raw(`{"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`, 8)},
		{"sub byte", RuleSubByte, "t", raw(`{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}`, 1)},
		{"f6 sub byte", RuleSubByte, "t", raw(`{"t":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,1]}}`, 1)},
		{"nbytes", RuleNBytes, "t", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}`, 12)},
		{"hole", RuleContiguous, "u", raw(`{`+e+`,"u":{"dtype":"U8","shape":[1],"data_offsets":[9,10]}}`, 10)},
		{"overlap", RuleContiguous, "u", raw(`{`+e+`,"u":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8)},
		{"shared", RuleContiguous, "u", raw(`{`+e+`,"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8)},
		{"not at zero", RuleContiguous, "t", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12)},
		{"file too long", RuleFileSize, "", raw(`{`+e+`}`, 9)},
		{"file too short", RuleFileSize, "", raw(`{`+e+`}`, 7)},
		{"duplicate tensor", RuleDuplicateKey, "t", raw(`{`+e+`,`+e+`}`, 8)},
		{"duplicate field", RuleDuplicateKey, "t", raw(`{"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8)},
		{"empty name", RuleEmptyName, "", raw(`{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8)},
		{"unterminated", RuleJSON, "", raw(`{"t`, 0)},
		{"bad escape", RuleJSON, "", raw(`{"\q":1}`, 0)},
		{"control char", RuleJSON, "", raw("{\"a\tb\":1}", 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, via := range []string{"Read", "Parse"} {
				var err error
				if via == "Read" {
					_, err = Read(bytes.NewReader(c.file), int64(len(c.file)), "bad.safetensors")
				} else {
					_, err = Parse("bad.safetensors", c.file)
				}
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("%s: got %v, want a FormatError", via, err)
				}
				if fe.Rule != c.rule || fe.Tensor != c.tensor || fe.File != "bad.safetensors" {
					t.Fatalf("%s: got rule %q tensor %q (%v), want rule %q tensor %q", via, fe.Rule, fe.Tensor, err, c.rule, c.tensor)
				}
				if !strings.Contains(err.Error(), "bad.safetensors") || !strings.Contains(err.Error(), c.rule) {
					t.Fatalf("message %q names neither file nor rule", err)
				}
			}
		})
	}
}

// A file that starts with text (JSON, HTML, a Git LFS pointer saved under
// the shard's name) is said to be no safetensors file, not only a length
// past the limit.
func TestTextIsNotSafetensors(t *testing.T) {
	for _, start := range []string{`{"a":1}` + "\n", "version https://git-lfs.github.com/spec/v1\n", "<!DOCTYPE html>"} {
		_, err := ParsePrefix("x.safetensors", []byte(start), int64(len(start)))
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Rule != RuleHeaderTooBig || !strings.Contains(err.Error(), "not a safetensors file: it starts with text") {
			t.Errorf("%q: %v", start, err)
		}
	}
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, 90_000_000_000)
	if _, err := ParsePrefix("x.safetensors", b, 16); err == nil || strings.Contains(err.Error(), "starts with text") {
		t.Errorf("a binary length past the limit: %v", err)
	}
}

func TestAccepted(t *testing.T) {
	for name, js := range map[string]string{
		"leading whitespace":   " \n\t{}",
		"empty":                "{}",
		"metadata null":        `{"__metadata__":null}`,
		"escaped name":         `{"a\u00e9\ud83d\ude00":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`,
		"zero sized in middle": `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"z":{"dtype":"F32","shape":[3,0],"data_offsets":[1,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`,
		"out of order":         `{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
	} {
		f := raw(js, 0)
		h, err := Parse("ok.safetensors", f)
		if err != nil && strings.Contains(err.Error(), RuleFileSize) {
			// add the data section the entries call for
			var need uint64
			if h2, e2 := ParsePrefix("ok", f, -1); e2 == nil {
				need = h2.DataLen()
			}
			f = raw(js, int(need))
			h, err = Parse("ok.safetensors", f)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for i := 1; i < len(h.Tensors); i++ {
			if h.Tensors[i].Begin < h.Tensors[i-1].End {
				t.Errorf("%s: tensors not in data order", name)
			}
		}
		if name == "escaped name" {
			if _, ok := h.Lookup("aé😀"); !ok {
				t.Errorf("escaped name not decoded")
			}
		}
		if name == "out of order" {
			if a, _ := h.Lookup("a"); a.Begin != 0 || h.Tensors[0].Name != "a" {
				t.Errorf("lookup after sorting broken")
			}
		}
	}
}

func TestPrefix(t *testing.T) {
	data, err := Encode([]WriteTensor{{Name: "w", DType: U8, Shape: []uint64{4}, Data: []byte{1, 2, 3, 4}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	if n, err := PrefixNeed("f", data[:3], size); err != nil || n != 8 {
		t.Fatalf("3-byte prefix: %d %v", n, err)
	}
	want := int64(8 + binary.LittleEndian.Uint64(data))
	if n, err := PrefixNeed("f", data[:8], size); err != nil || n != want {
		t.Fatalf("8-byte prefix: %d %v, want %d", n, err, want)
	}
	if _, err := ParsePrefix("f", data[:want-1], size); !errors.Is(err, ErrShortPrefix) {
		t.Fatalf("short prefix: %v", err)
	}
	h, err := ParsePrefix("f", data[:want], size)
	if err != nil || len(h.Tensors) != 1 {
		t.Fatalf("exact prefix: %v", err)
	}
	if _, err := ParsePrefix("f", data, -1); err != nil {
		t.Fatalf("unknown size: %v", err)
	}
	big := make([]byte, 16)
	binary.LittleEndian.PutUint64(big, MaxHeaderLen+1)
	if _, err := PrefixNeed("f", big, -1); !errors.Is(err, ErrHeaderTooLarge) {
		t.Fatalf("want ErrHeaderTooLarge, got %v", err)
	}
}

// lyingReader claims a huge size but holds only a few bytes; Read must not
// allocate what the header length claims before the bytes arrive.
type lyingReader struct{ b []byte }

func (l lyingReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(l.b)) {
		return 0, errors.New("EOF")
	}
	n := copy(p, l.b[off:])
	if n < len(p) {
		return n, nil
	}
	return n, nil
}

func TestReadUnknownSizeBounded(t *testing.T) {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint64(b, 99_000_000)
	_, err := Read(lyingReader{b}, -1, "lying.safetensors")
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Rule != RuleHeaderBounds {
		t.Fatalf("got %v", err)
	}
}

func TestWriterRejects(t *testing.T) {
	for _, ts := range [][]WriteTensor{
		{{Name: "", DType: U8, Shape: []uint64{1}, Data: []byte{0}}},
		{{Name: "a", DType: U8, Shape: []uint64{2}, Data: []byte{0}}},
		{{Name: "a", DType: F4, Shape: []uint64{3}, Data: []byte{0, 0}}},
		{{Name: "a", DType: U8, Shape: []uint64{1}, Data: []byte{0}}, {Name: "a", DType: U8, Shape: []uint64{1}, Data: []byte{0}}},
	} {
		if _, err := Encode(ts, nil); err == nil {
			t.Errorf("Encode(%v) accepted", ts)
		}
	}
}
