package checkpoint

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"

	"github.com/quantscope/quantscope/formats/scheme"
)

// WriteJSON writes the inventory as one JSON object, the same document
// json.Marshal gives, but streamed: a large repo lists hundreds of thousands
// of tensors, and building that in memory first costs more than the parse.
func (inv *Inventory) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	field := func(first bool, name string, v any) error {
		if !first {
			bw.WriteByte(',')
		}
		bw.WriteString(strconv.Quote(name))
		bw.WriteByte(':')
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = bw.Write(b)
		return err
	}
	bw.WriteByte('{')
	if err := field(true, "source", inv.Source); err != nil {
		return err
	}
	if inv.Commit != "" {
		if err := field(false, "commit", inv.Commit); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"summary", inv.Summary}, {"scheme", inv.Scheme}} {
		if err := field(false, f.name, f.v); err != nil {
			return err
		}
	}
	bw.WriteString(`,"modules":[`)
	var buf []byte
	for i, m := range inv.Modules {
		if i > 0 {
			bw.WriteByte(',')
		}
		buf = m.AppendJSON(buf[:0], !inv.OmitModuleTensors)
		bw.Write(buf)
	}
	bw.WriteString(`],"tensors":`)
	if inv.Tensors == nil && inv.streamFrom != nil {
		bw.WriteByte('[')
		first := true
		inv.streamFrom.eachTensor(func(t *TensorEntry) {
			if !first {
				bw.WriteByte(',')
			}
			first = false
			buf = appendTensor(buf[:0], t)
			bw.Write(buf)
		})
		bw.WriteByte(']')
	} else if inv.Tensors == nil {
		bw.WriteString("null") // as encoding/json writes a nil slice
	} else {
		bw.WriteByte('[')
		for i := range inv.Tensors {
			if i > 0 {
				bw.WriteByte(',')
			}
			buf = appendTensor(buf[:0], &inv.Tensors[i])
			bw.Write(buf)
		}
		bw.WriteByte(']')
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"findings", inv.Findings}, {"files", inv.Files}, {"fetch", inv.Fetch}, {"forward", inv.Forward}, {"layers", inv.Layers}} {
		if err := field(false, f.name, f.v); err != nil {
			return err
		}
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// appendTensor encodes a TensorEntry as encoding/json would.
func appendTensor(b []byte, t *TensorEntry) []byte {
	b = append(b, `{"name":`...)
	b = scheme.AppendJSONString(b, t.Name)
	b = append(b, `,"file":`...)
	b = scheme.AppendJSONString(b, t.File)
	b = append(b, `,"dtype":`...)
	b = scheme.AppendJSONString(b, t.DType)
	b = append(b, `,"shape":[`...)
	for i, d := range t.Shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, d, 10)
	}
	b = append(b, `],"data_offsets":[`...)
	b = strconv.AppendUint(b, t.DataOffsets[0], 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, t.DataOffsets[1], 10)
	b = append(b, `],"module":`...)
	b = scheme.AppendJSONString(b, t.Module)
	b = append(b, `,"role":`...)
	b = scheme.AppendJSONString(b, t.Role)
	return append(b, '}')
}
