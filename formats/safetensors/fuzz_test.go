package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary files to the header reader. Every input must
// either parse into a header that obeys the format's invariants or fail with a
// *FormatError; Parse and Read must agree.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.safetensors"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add(raw(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F4","shape":[2,2],"data_offsets":[0,2]}}`, 2))
	f.Add(raw(`{"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"b":{"dtype":"I64","shape":[0],"data_offsets":[2,2]}}`, 2))
	f.Add(raw(`{"a\u000ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1))
	f.Add(raw("{\"a\x7fb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1))
	f.Add(raw("{\"a\xc3\xa9\\u00e9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"__metadata__\":{\"k\xe2\x82\xac\":\"v\xed\xa0\x80\"}}", 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Parse("fuzz", data)
		h2, err2 := Read(bytes.NewReader(data), int64(len(data)), "fuzz")
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Parse %v, Read %v", err, err2)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("not a FormatError: %v", err)
			}
			return
		}
		if !utf8.Valid(data[8:h.DataStart()]) { // the scanner checks UTF-8 as it reads strings
			t.Fatalf("a header that is not valid UTF-8 accepted")
		}
		if h.FileSize() != int64(len(data)) || len(h.Tensors) != len(h2.Tensors) {
			t.Fatalf("file size %d != %d", h.FileSize(), len(data))
		}
		var pos uint64
		for i := range h.Tensors {
			tt := &h.Tensors[i]
			if controlAt(tt.Name) >= 0 {
				t.Fatalf("name %q with a control character accepted", tt.Name)
			}
			if tt.Begin != pos || tt.NBytes()*8 != tt.Elements()*tt.DType.Bits() {
				t.Fatalf("invariant broken at %q", tt.Name)
			}
			pos = tt.End
		}
		// What parses must survive a rewrite.
		ws := make([]WriteTensor, len(h.Tensors))
		for i, tt := range h.Tensors {
			ws[i] = WriteTensor{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Data: data[h.DataStart()+int64(tt.Begin) : h.DataStart()+int64(tt.End)]}
		}
		out, err := Encode(ws, h.Metadata)
		if err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		if _, err := Parse("rewritten", out); err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
	})
}
