package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
)

// WriteTensor is one tensor to write: its header entry and its bytes.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []uint64
	Data  []byte
}

// Entry is one tensor's header entry for EncodeHeader: its data size is
// checked against dtype × shape.
type Entry struct {
	Name   string
	DType  DType
	Shape  []uint64
	NBytes uint64
}

// EncodeHeader lays out the 8-byte length and the JSON of a safetensors
// header: __metadata__ (only when non-empty, keys sorted) then the entries in
// the order given, data offsets assigned in that order, the JSON padded with
// spaces to a multiple of 8 as the reference writer does. It returns the
// header and the data section's length, so a writer can stream the data (or
// leave it sparse) after it.
func EncodeHeader(entries []Entry, metadata map[string]string) ([]byte, uint64, error) {
	var hdr bytes.Buffer
	hdr.Write(make([]byte, 8))
	hdr.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		hdr.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSONString(&hdr, k)
			hdr.WriteByte(':')
			writeJSONString(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
		first = false
	}
	seen := make(map[string]bool, len(entries))
	var off uint64
	for _, t := range entries {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, 0, fmt.Errorf("safetensors: write: invalid tensor name %q", t.Name)
		}
		if seen[t.Name] {
			return nil, 0, fmt.Errorf("safetensors: write: tensor %q given twice", t.Name)
		}
		seen[t.Name] = true
		if t.DType.Bits() == 0 {
			return nil, 0, fmt.Errorf("safetensors: write: tensor %q: invalid dtype", t.Name)
		}
		elems := uint64(1)
		for _, d := range t.Shape {
			hi, lo := bits.Mul64(elems, d)
			if hi != 0 {
				return nil, 0, fmt.Errorf("safetensors: write: tensor %q: shape overflows", t.Name)
			}
			elems = lo
		}
		hi, nbits := bits.Mul64(elems, t.DType.Bits())
		if hi != 0 || nbits%8 != 0 || nbits/8 != t.NBytes {
			return nil, 0, fmt.Errorf("safetensors: write: tensor %q: %s %v needs %d bits, data has %d bytes",
				t.Name, t.DType, t.Shape, nbits, t.NBytes)
		}
		if !first {
			hdr.WriteByte(',')
		}
		first = false
		writeJSONString(&hdr, t.Name)
		hdr.WriteString(`:{"dtype":"`)
		hdr.WriteString(t.DType.String())
		hdr.WriteString(`","shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.FormatUint(d, 10))
		}
		hdr.WriteString(`],"data_offsets":[`)
		hdr.WriteString(strconv.FormatUint(off, 10))
		hdr.WriteByte(',')
		off += t.NBytes
		hdr.WriteString(strconv.FormatUint(off, 10))
		hdr.WriteString("]}")
	}
	hdr.WriteByte('}')
	for (hdr.Len()-8)%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := hdr.Bytes()
	binary.LittleEndian.PutUint64(out, uint64(len(out)-8))
	return out, off, nil
}

// Encode lays out a whole safetensors file: EncodeHeader's header, then the
// tensors' data in the same order.
func Encode(tensors []WriteTensor, metadata map[string]string) ([]byte, error) {
	entries := make([]Entry, len(tensors))
	for i, t := range tensors {
		entries[i] = Entry{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: uint64(len(t.Data))}
	}
	hdr, n, err := EncodeHeader(entries, metadata)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(hdr), len(hdr)+int(n))
	copy(out, hdr)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a Go string always marshals
	buf.Write(b)
}
