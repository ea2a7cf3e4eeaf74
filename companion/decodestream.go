package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"unsafe"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// decodeModule streams a module's rows [A:B) through the CPU backend: bands
// decoded on every core, each written to --out at its own offset by the
// worker that decoded it (in any order; the file has its full size first),
// the statistics counted by the workers on the way (their moments merged in
// row order); --json's text is formatted by the workers and written in row
// order. The working set is the backend's (a few bands a core), whatever
// the module's size.
func decodeModule(ctx context.Context, c *checkpoint.Checkpoint, m *scheme.Module, rowSpec, out string, asJSON bool, stdout io.Writer) (err error) {
	rows, cols := m.Matrix2D()
	lo, hi, err := parseRows(rowSpec, int(rows))
	if err != nil {
		return fmt.Errorf("module %q: %w", m.Name, err)
	}
	full, err := ops.ModuleSource(m, c)
	if err != nil {
		return err
	}
	if l, ok := full.(interface{ LimitRows(int) }); ok {
		l.LimitRows(hi)
	}
	src := sliceSource{full, lo, hi}
	var o *outFile
	var f *os.File
	if out != "" {
		if o, err = createOut(out); err != nil {
			return err
		}
		f = o.f
		defer func() {
			if err == nil {
				err = o.commit()
			} else {
				o.abort() // what was at --out stays
			}
		}()
	}
	var buf []byte
	sink := func(b *kernels.Band) error {
		if f != nil {
			var werr error
			if buf, werr = writeLE(f, buf, b.Values); werr != nil {
				return o.wrap(werr)
			}
		}
		return nil
	}
	be := cpu.New()
	if !asJSON {
		// Each worker writes the bands it decoded at their own offsets
		// (pwrite), so the copies into the page cache run on every core
		// instead of one writer; the file gets its full size first. A
		// device or pipe takes the bands front to back.
		opt := kernels.StatsOptions{Moments: true}
		switch {
		case f != nil && o.seekable():
			rowBytes := 4 * int64(cols)
			if err := f.Truncate(int64(hi-lo) * rowBytes); err != nil {
				return o.wrap(err)
			}
			opt.Each = func(_ int, b *kernels.Band) error {
				var werr error
				if b.Aux, werr = writeLEAt(f, b.Aux, b.Values, int64(b.Lo)*rowBytes); werr != nil {
					return o.wrap(werr)
				}
				return nil
			}
		case f != nil:
			opt.Sink = sink
		}
		st, err := be.Stats(ctx, src, opt)
		if err != nil {
			return err
		}
		return printValueStats(stdout, hi-lo, int(cols), scheme.Stats{Min: st.Min, Max: st.Max, Mean: st.Mean, Std: st.Std, NaN: int(st.NaN), Inf: int(st.Inf)})
	}
	// --json: the head once the values are sure to follow (the module
	// opened), each band's text formatted by its worker, the tail.
	if _, err := stdout.Write(appendJSONHead(nil, m.Name, hi-lo, int(cols))); err != nil {
		return err
	}
	err = be.Dequantize(ctx, src, kernels.DequantOptions{Each: func(_ int, b *kernels.Band) error {
		b.Aux = appendJSONValues(b.Aux[:0], b.Values, b.Lo == 0)
		return nil
	}}, func(b *kernels.Band) error {
		if err := sink(b); err != nil {
			return err
		}
		_, err := stdout.Write(b.Aux)
		return err
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, "]}\n")
	return err
}

// sliceSource is rows [lo, hi) of a RowSource.
type sliceSource struct {
	kernels.RowSource
	lo, hi int
}

func (s sliceSource) Shape() (int, int) {
	_, cols := s.RowSource.Shape()
	return s.hi - s.lo, cols
}

func (s sliceSource) NewDecoder() kernels.RowDecoder {
	return sliceDecoder{s.RowSource.NewDecoder(), s.lo}
}

type sliceDecoder struct {
	kernels.RowDecoder
	lo int
}

func (d sliceDecoder) Release() { kernels.Release(d.RowDecoder) }

func (d sliceDecoder) Decode(dst []float32, lo, hi int, meta *kernels.BandMeta) error {
	return d.RowDecoder.Decode(dst, d.lo+lo, d.lo+hi, meta)
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// writeLE writes v as little-endian float32 in one write: the values' own
// memory on a little-endian machine, else converted through buf.
func writeLE(w io.Writer, buf []byte, v []float32) ([]byte, error) {
	if len(v) == 0 {
		return buf, nil
	}
	if littleEndian {
		_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		return buf, err
	}
	buf = slices.Grow(buf[:0], 4*len(v))[:4*len(v)]
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	_, err := w.Write(buf)
	return buf, err
}

// writeLEAt is writeLE at offset off (pwrite, so that several workers may
// write their bands at once); buf is the caller's own conversion buffer.
func writeLEAt(f *os.File, buf []byte, v []float32, off int64) ([]byte, error) {
	if len(v) == 0 {
		return buf, nil
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	if !littleEndian {
		buf = slices.Grow(buf[:0], 4*len(v))[:4*len(v)]
		for i, x := range v {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		b = buf
	}
	_, err := f.WriteAt(b, off)
	return buf, err
}

// appendJSONHead starts {"name","shape","values"} as json.Marshal of a map
// writes it (keys sorted, HTML-safe escaping).
func appendJSONHead(b []byte, name string, rows, cols int) []byte {
	n, _ := json.Marshal(name)
	b = append(b, `{"name":`...)
	b = append(b, n...)
	b = append(b, `,"shape":[`...)
	b = strconv.AppendInt(b, int64(rows), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(cols), 10)
	return append(b, `],"values":[`...)
}

// appendJSONValues appends comma-separated values exactly as encoding/json
// writes float64(v) (shortest repr; exponent form below 1e-6 and from 1e21,
// "e-07" shortened to "e-7"), NaN and infinities as the strings "NaN",
// "Infinity" and "-Infinity" (JSON has no such numbers). first leaves out the leading comma.
func appendJSONValues(b []byte, v []float32, first bool) []byte {
	for i, x := range v {
		if i > 0 || !first {
			b = append(b, ',')
		}
		f := float64(x)
		switch {
		case f != f:
			b = append(b, `"NaN"`...)
			continue
		case math.IsInf(f, 1):
			b = append(b, `"Infinity"`...)
			continue
		case math.IsInf(f, -1):
			b = append(b, `"-Infinity"`...)
			continue
		}
		format := byte('f')
		if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
			format = 'e'
		}
		b = strconv.AppendFloat(b, f, format, -1, 64)
		if format == 'e' {
			if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
				b[n-2] = b[n-1]
				b = b[:n-1]
			}
		}
	}
	return b
}
