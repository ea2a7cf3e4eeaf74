// Package wire is the framed protocol between the companion and the CUDA
// worker (kernels/cuda/worker) over the worker's stdin and stdout.
//
// A frame is the 4-byte magic "QSW1", a little-endian uint32 header length,
// a little-endian uint64 payload length, the header (JSON) and the payload
// (packed bytes: codes, scales, float32 values where an operation takes or
// returns them, in the order the header's Parts lists their lengths).
//
// The worker's first frame is a Hello. Anything else first (gorgonia.org/cu
// prints a line and exits when cuInit fails) means there is no usable GPU:
// Read reports it as a *NotFrameError carrying the bytes it saw.
package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Magic starts every frame.
const Magic = "QSW1"

// Version is the protocol version a Hello announces.
const Version = 1

// MaxHeader bounds a frame's JSON header.
const MaxHeader = 1 << 16

// Operations a request names.
const (
	OpHello        = "hello"
	OpInfo         = "info"          // free and total memory now
	OpDequantFP8   = "dequant_fp8"   // parts: codes, f32 scales → f32 values
	OpDequantNVFP4 = "dequant_nvfp4" // parts: packed, e4m3 scales → f32 values
	OpDequantMXFP4 = "dequant_mxfp4" // parts: packed, e8m0 scales → f32 values
	OpQuantNVFP4   = "quant_nvfp4"   // parts: f32 weight → packed, e4m3 scales
	OpW4AFP8       = "w4a_fp8"       // parts: e4m3 codes, f32 token scales, int4 codes (packed), f32 group scales → f32 outputs
	OpDequantInt   = "dequant_int"   // parts: packed words, f32 scales, f32 zeros, i32 groups → f32 values (int.go)
	OpStats        = "stats"         // parts: Source's dequant parts → block partials, 65536 buckets (int.go)
)

// Hello is the worker's first frame: the device it owns.
type Hello struct {
	Op       string `json:"op"` // OpHello
	Version  int    `json:"version"`
	Device   int    `json:"device"`
	Name     string `json:"name"`
	TotalMem int64  `json:"total_mem"`
	FreeMem  int64  `json:"free_mem"`
	Major    int    `json:"cc_major"`
	Minor    int    `json:"cc_minor"`
	// Devices is how many GPUs the driver sees (0 from older workers: one).
	Devices int `json:"devices,omitempty"`
}

// Request is one operation and its parameters; the payload's parts follow.
type Request struct {
	Op     string  `json:"op"`
	ID     uint64  `json:"id"`
	Rows   int64   `json:"rows,omitempty"`
	Cols   int64   `json:"cols,omitempty"`
	R      int64   `json:"r,omitempty"`      // FP8 scale grid: rows per scale
	C      int64   `json:"c,omitempty"`      // and columns per scale
	Inv    bool    `json:"inv,omitempty"`    // FP8: divide by the scale (GPT-QModel's weight_scale_inv)
	E5M2   bool    `json:"e5m2,omitempty"`   // FP8 element format e5m2 (else e4m3)
	Global float32 `json:"global,omitempty"` // NVFP4: the multiplier of every block scale
	Recipe string  `json:"recipe,omitempty"`
	T      int64   `json:"t,omitempty"` // W4A: tokens, input width K, outputs N
	K      int64   `json:"k,omitempty"`
	N      int64   `json:"n,omitempty"`
	Fwd    *Fwd    `json:"fwd,omitempty"` // the forward operations' parameters (forward.go)
	Parts  []int64 `json:"parts,omitempty"`
	IntFields
}

// Response answers the request with the same ID.
type Response struct {
	ID       uint64  `json:"id"`
	Error    string  `json:"error,omitempty"`
	Scale2   float32 `json:"scale2,omitempty"` // quant_nvfp4: the global scale
	FreeMem  int64   `json:"free_mem,omitempty"`
	TotalMem int64   `json:"total_mem,omitempty"`
	Millis   float64 `json:"ms,omitempty"` // device time of the kernels
	Parts    []int64 `json:"parts,omitempty"`
}

// NotFrameError is input that does not start with Magic.
type NotFrameError struct {
	Got []byte // what was read instead (up to the frame prefix's length)
}

func (e *NotFrameError) Error() string {
	return fmt.Sprintf("wire: not a frame: starts with %q", e.Got)
}

// Write writes one frame: header h as JSON, then the payload parts in order.
func Write(w io.Writer, h any, parts ...[]byte) error {
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if len(hb) > MaxHeader {
		return fmt.Errorf("wire: header of %d bytes exceeds %d", len(hb), MaxHeader)
	}
	var n uint64
	for _, p := range parts {
		n += uint64(len(p))
	}
	pre := make([]byte, 16, 16+len(hb))
	copy(pre, Magic)
	binary.LittleEndian.PutUint32(pre[4:], uint32(len(hb)))
	binary.LittleEndian.PutUint64(pre[8:], n)
	if _, err := w.Write(append(pre, hb...)); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// Read reads one frame, refusing payloads over maxPayload bytes before
// allocating them. It returns io.EOF only when r ends before any byte.
func Read(r io.Reader, maxPayload uint64) (header, payload []byte, err error) {
	var pre [16]byte
	n, err := io.ReadFull(r, pre[:4])
	if err != nil {
		if err == io.EOF {
			return nil, nil, io.EOF
		}
		return nil, nil, &NotFrameError{Got: append([]byte(nil), pre[:n]...)}
	}
	if string(pre[:4]) != Magic {
		return nil, nil, &NotFrameError{Got: append([]byte(nil), pre[:4]...)}
	}
	if _, err := io.ReadFull(r, pre[4:]); err != nil {
		return nil, nil, fmt.Errorf("wire: truncated frame prefix: %w", err)
	}
	hl := binary.LittleEndian.Uint32(pre[4:])
	pl := binary.LittleEndian.Uint64(pre[8:])
	if hl > MaxHeader {
		return nil, nil, fmt.Errorf("wire: header of %d bytes exceeds %d", hl, MaxHeader)
	}
	if pl > maxPayload {
		return nil, nil, fmt.Errorf("wire: payload of %d bytes exceeds the limit of %d", pl, maxPayload)
	}
	header = make([]byte, hl)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, nil, fmt.Errorf("wire: truncated header: %w", err)
	}
	payload = make([]byte, pl)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, nil, fmt.Errorf("wire: truncated payload (%d bytes): %w", pl, err)
	}
	return header, payload, nil
}

// Split cuts a payload into the parts whose lengths are given, refusing
// lengths that do not add up to it.
func Split(payload []byte, lens []int64) ([][]byte, error) {
	var sum uint64
	for _, l := range lens {
		if l < 0 {
			return nil, fmt.Errorf("wire: negative part length %d", l)
		}
		sum += uint64(l)
		if sum > uint64(len(payload)) {
			break
		}
	}
	if sum != uint64(len(payload)) {
		return nil, fmt.Errorf("wire: parts %v do not add up to the payload's %d bytes", lens, len(payload))
	}
	out := make([][]byte, len(lens))
	off := int64(0)
	for i, l := range lens {
		out[i] = payload[off : off+l : off+l]
		off += l
	}
	return out, nil
}

// Lens returns the lengths of parts, for a header's Parts.
func Lens(parts ...[]byte) []int64 {
	l := make([]int64, len(parts))
	for i, p := range parts {
		l[i] = int64(len(p))
	}
	return l
}
