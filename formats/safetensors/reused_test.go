package safetensors

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// A header parsed with ParseReusedPrefix keeps nothing of the buffer it
// came in: overwritten afterwards (the next shard's header read into it),
// the names, shapes and metadata stay what ParsePrefix reads from a copy.
// An error's text stays whole too.
func TestParseReusedPrefixKeepsNothingOfItsBuffer(t *testing.T) {
	entries := []Entry{
		{Name: "model.layers.0.mlp.down_proj.weight", DType: U8, Shape: []uint64{4, 8}, NBytes: 32},
		{Name: "model.layers.0.mlp.down_proj.weight_scale", DType: F8_E4M3, Shape: []uint64{4, 1}, NBytes: 4},
		{Name: `a "quoted" name \ é`, DType: BF16, Shape: []uint64{2}, NBytes: 4},
	}
	hdr, _, err := EncodeHeader(entries, map[string]string{"format": "pt", "quantscope.source": "org/name"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParsePrefix("f", hdr, -1)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Clone(hdr)
	got, err := ParseReusedPrefix("f", buf, -1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 8; i < len(buf); i++ {
		buf[i] = 'x'
	}
	if !reflect.DeepEqual(got.Tensors, want.Tensors) || !reflect.DeepEqual(got.Metadata, want.Metadata) || got.Len != want.Len {
		t.Fatalf("after the buffer changed:\n got %+v %v\nwant %+v %v", got.Tensors, got.Metadata, want.Tensors, want.Metadata)
	}

	// an entry whose data_offsets do not match its dtype and shape: the
	// error names the tensor
	bad := bytes.Replace(bytes.Clone(hdr), []byte(`"shape":[4,8]`), []byte(`"shape":[4,9]`), 1)
	_, wantErr := ParsePrefix("f", bad, -1)
	if wantErr == nil {
		t.Fatal("the changed shape was accepted")
	}
	_, err = ParseReusedPrefix("f", bad, -1)
	for i := 8; i < len(bad); i++ {
		bad[i] = 'x'
	}
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want a FormatError", err)
	}
	if err.Error() != wantErr.Error() || fe.Tensor != entries[0].Name {
		t.Fatalf("error after the buffer changed: %v (tensor %q); want %v", err, fe.Tensor, wantErr)
	}
}

// A number checks for overflow at its twentieth digit: 2^64-1 is read,
// 2^64 and longer numbers are refused.
func TestUintAtTheEdgeOf64Bits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"1844674407370955161", 1844674407370955161, true},
		{"184467440737095516150", 0, false},
		{"7]", 7, true},
	} {
		s := &scanner{b: c.in, file: "f"}
		v, err := s.uint("t", RuleShape, "shape")
		if (err == nil) != c.ok || v != c.want {
			t.Errorf("%s: %d, %v; want %d, ok %v", c.in, v, err, c.want, c.ok)
		}
	}
}
