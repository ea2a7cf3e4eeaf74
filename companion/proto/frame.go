package proto

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// A binary frame carries one bulk array of a job's result:
//
//	offset  size      field
//	0       4         magic "QSA" and the frame version, 1
//	4       1         dtype code (DType)
//	5       1         ndim, 0..MaxDims
//	6       2         id length, little-endian uint16, 1..MaxIDLen
//	8       2         name length, little-endian uint16, 1..MaxNameLen
//	10      4·ndim    the dims, little-endian uint32 each, row-major
//	…       id, then name (UTF-8)
//	…       zero bytes up to the next multiple of 8 (so the page views the
//	        data in place: a Float32Array or BigInt64Array needs alignment)
//	…       the data, little-endian, exactly product(dims) · size bytes
//
// A frame that breaks any of these is refused whole.
const (
	frameMagic   = "QSA\x01"
	frameFixed   = 10
	MaxDims      = 8
	MaxIDLen     = 256
	MaxNameLen   = 1024
	frameAlign   = 8
	maxFrameData = math.MaxInt64 / 2
)

// DType is the element type of a binary frame.
type DType uint8

// The element types.
const (
	F32 DType = 1
	F64 DType = 2
	I32 DType = 3
	I64 DType = 4
	U8  DType = 5
)

var dtypeNames = map[DType]string{F32: "f32", F64: "f64", I32: "i32", I64: "i64", U8: "u8"}

// String is the dtype's name in a result's array descriptors.
func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes, 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	case U8:
		return 1
	}
	return 0
}

// Frame is one bulk array.
type Frame struct {
	ID    string // the job
	Name  string // the array, as the result's descriptor names it
	DType DType
	Shape []int
	Data  []byte // little-endian elements; a parsed frame's Data aliases the input
}

// Desc is the frame's descriptor in a result message.
func (f Frame) Desc() ArrayDesc {
	return ArrayDesc{Name: f.Name, DType: f.DType.String(), Shape: f.Shape}
}

func headerLen(id, name string, ndim int) int {
	n := frameFixed + 4*ndim + len(id) + len(name)
	return (n + frameAlign - 1) / frameAlign * frameAlign
}

// elements is the product of shape, or an error when a dim is out of range
// or the product exceeds limit.
func elements(shape []int, limit int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d > math.MaxUint32 {
			return 0, fmt.Errorf("dim %d out of range", d)
		}
		if d != 0 && n > limit/int64(d) {
			return 0, fmt.Errorf("shape %v holds more elements than the frame", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

func checkNames(id, name string) error {
	switch {
	case len(id) == 0 || len(id) > MaxIDLen:
		return fmt.Errorf("id length %d, want 1..%d", len(id), MaxIDLen)
	case len(name) == 0 || len(name) > MaxNameLen:
		return fmt.Errorf("name length %d, want 1..%d", len(name), MaxNameLen)
	case !utf8.ValidString(id) || !utf8.ValidString(name):
		return fmt.Errorf("id or name is not UTF-8")
	}
	return nil
}

// EncodeFrame writes f as one binary frame.
func EncodeFrame(f Frame) ([]byte, error) {
	if err := checkNames(f.ID, f.Name); err != nil {
		return nil, fmt.Errorf("proto: frame: %w", err)
	}
	size := f.DType.Size()
	if size == 0 {
		return nil, fmt.Errorf("proto: frame %q: unknown dtype %d", f.Name, f.DType)
	}
	if len(f.Shape) > MaxDims {
		return nil, fmt.Errorf("proto: frame %q: %d dims, at most %d", f.Name, len(f.Shape), MaxDims)
	}
	n, err := elements(f.Shape, maxFrameData/int64(size))
	if err != nil {
		return nil, fmt.Errorf("proto: frame %q: %w", f.Name, err)
	}
	if int64(len(f.Data)) != n*int64(size) {
		return nil, fmt.Errorf("proto: frame %q: %d data bytes, shape %v of %s needs %d", f.Name, len(f.Data), f.Shape, f.DType, n*int64(size))
	}
	h := headerLen(f.ID, f.Name, len(f.Shape))
	out := make([]byte, h, h+len(f.Data))
	copy(out, frameMagic)
	out[4] = byte(f.DType)
	out[5] = byte(len(f.Shape))
	binary.LittleEndian.PutUint16(out[6:], uint16(len(f.ID)))
	binary.LittleEndian.PutUint16(out[8:], uint16(len(f.Name)))
	p := frameFixed
	for _, d := range f.Shape {
		binary.LittleEndian.PutUint32(out[p:], uint32(d))
		p += 4
	}
	p += copy(out[p:], f.ID)
	copy(out[p:], f.Name)
	return append(out, f.Data...), nil
}

// ParseFrame reads one binary frame. Every length is checked against the
// frame before it is used; the data must be exactly what the shape needs.
func ParseFrame(b []byte) (Frame, error) {
	fail := func(format string, a ...any) (Frame, error) {
		return Frame{}, fmt.Errorf("proto: binary frame: "+format, a...)
	}
	if len(b) < frameFixed {
		return fail("%d bytes, shorter than the %d-byte header", len(b), frameFixed)
	}
	if string(b[:4]) != frameMagic {
		return fail("bad magic %q (want %q)", b[:4], frameMagic)
	}
	f := Frame{DType: DType(b[4])}
	size := f.DType.Size()
	if size == 0 {
		return fail("unknown dtype code %d", b[4])
	}
	ndim := int(b[5])
	if ndim > MaxDims {
		return fail("%d dims, at most %d", ndim, MaxDims)
	}
	idLen, nameLen := int(binary.LittleEndian.Uint16(b[6:])), int(binary.LittleEndian.Uint16(b[8:]))
	fixed := frameFixed + 4*ndim
	if len(b) < fixed+idLen+nameLen {
		return fail("header of %d bytes runs past the frame's %d", fixed+idLen+nameLen, len(b))
	}
	f.Shape = make([]int, ndim)
	for i := range f.Shape {
		f.Shape[i] = int(binary.LittleEndian.Uint32(b[frameFixed+4*i:]))
	}
	f.ID = string(b[fixed : fixed+idLen])
	f.Name = string(b[fixed+idLen : fixed+idLen+nameLen])
	if err := checkNames(f.ID, f.Name); err != nil {
		return fail("%v", err)
	}
	h := headerLen(f.ID, f.Name, ndim)
	if len(b) < h {
		return fail("header padding runs past the frame")
	}
	for _, c := range b[fixed+idLen+nameLen : h] {
		if c != 0 {
			return fail("nonzero header padding")
		}
	}
	data := b[h:]
	n, err := elements(f.Shape, int64(len(data)/size))
	if err != nil {
		return fail("%q: %v", f.Name, err)
	}
	if int64(len(data)) != n*int64(size) {
		return fail("%q: %d data bytes, shape %v of %s needs %d", f.Name, len(data), f.Shape, f.DType, n*int64(size))
	}
	f.Data = data
	return f, nil
}

// F32Data encodes float32 values little-endian.
func F32Data(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// I64Data encodes int64 values little-endian.
func I64Data(v []int64) []byte {
	out := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(out[8*i:], uint64(x))
	}
	return out
}

// Float32s decodes an f32 frame's data.
func (f Frame) Float32s() ([]float32, error) {
	if f.DType != F32 {
		return nil, fmt.Errorf("proto: frame %q is %s, not f32", f.Name, f.DType)
	}
	out := make([]float32, len(f.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4*i:]))
	}
	return out, nil
}

// Int64s decodes an i64 frame's data.
func (f Frame) Int64s() ([]int64, error) {
	if f.DType != I64 {
		return nil, fmt.Errorf("proto: frame %q is %s, not i64", f.Name, f.DType)
	}
	out := make([]int64, len(f.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(f.Data[8*i:]))
	}
	return out, nil
}
