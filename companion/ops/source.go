package ops

import (
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
)

// ModuleSource opens a module's weight as a kernels.RowSource: bands of rows
// decoded by formats/scheme from r (a checkpoint, which reads into the
// decoders' own buffers).
func ModuleSource(m *scheme.Module, r scheme.TensorReader) (kernels.RowSource, error) {
	s, err := scheme.OpenRows(m, r)
	if err != nil {
		return nil, err
	}
	return moduleSource{s}, nil
}

type moduleSource struct{ s *scheme.RowStream }

func (m moduleSource) Shape() (rows, cols int) { return m.s.Shape() }

// LimitRows says no band past row hi will be decoded (a row slice): a
// remote checkpoint reads the weight ahead no further.
func (m moduleSource) LimitRows(hi int) { m.s.LimitRows(hi) }

func (m moduleSource) NewDecoder() kernels.RowDecoder {
	return &moduleDecoder{d: m.s.NewDecoder()}
}

// Packed hands the module's stored form to a backend that decodes it on its
// own device (kernels.PackedSource); nil when its layout has none.
func (m moduleSource) Packed() (*kernels.Packed, error) {
	p, err := m.s.Packed()
	if p == nil || err != nil {
		return nil, err
	}
	k := kernels.Packed(*p)
	return &k, nil
}

type moduleDecoder struct {
	d    *scheme.RowDecoder
	info scheme.BandInfo
}

// Release hands the decoder's buffers on (kernels.Releaser).
func (d *moduleDecoder) Release() { d.d.Release() }

func (d *moduleDecoder) Decode(dst []float32, lo, hi int, meta *kernels.BandMeta) error {
	if meta == nil {
		return d.d.Decode(dst, lo, hi, nil)
	}
	d.info = scheme.BandInfo{Scales: d.info.Scales[:0]}
	if err := d.d.Decode(dst, lo, hi, &d.info); err != nil {
		return err
	}
	i := &d.info
	*meta = kernels.BandMeta{Codes: i.Codes, AtMax: i.AtMax, Scales: append(meta.Scales[:0], i.Scales...),
		ScaleE4M3: i.ScaleE4M3, ScaleAtMax: i.ScaleAtMax, ScaleSubnormal: i.ScaleSubnormal}
	return nil
}
