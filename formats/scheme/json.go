package scheme

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// AppendJSON appends the module as encoding/json would marshal it. An
// inventory can list tens of thousands of modules; this avoids reflection.
// Without tensors the role → tensor map is left out (a page that fetches a
// module's tensors when it shows them does not need it).
func (m *Module) AppendJSON(b []byte, withTensors bool) []byte {
	b = append(b, `{"name":`...)
	b = AppendJSONString(b, m.Name)
	b = append(b, `,"kind":`...)
	b = AppendJSONString(b, m.Kind)
	b = append(b, `,"format":`...)
	b = AppendJSONString(b, m.Format)
	b = append(b, `,"layout":`...)
	b = AppendJSONString(b, m.Layout)
	if m.Bits != 0 {
		b = append(b, `,"bits":`...)
		b = strconv.AppendInt(b, int64(m.Bits), 10)
	}
	if m.GroupSize != 0 {
		b = append(b, `,"group_size":`...)
		b = strconv.AppendInt(b, int64(m.GroupSize), 10)
	}
	if len(m.Block) > 0 {
		b = append(b, `,"block":[`...)
		for i, v := range m.Block {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(v), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"weight_shape":`...)
	if m.WeightShape == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, v := range m.WeightShape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, ']')
	}
	if m.ShapeInferred {
		b = append(b, `,"shape_inferred":true`...)
	}
	b = append(b, `,"parameters":`...)
	b = strconv.AppendUint(b, m.Parameters, 10)
	b = append(b, `,"bias_parameters":`...)
	b = strconv.AppendUint(b, m.BiasParameters, 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendUint(b, m.Bytes, 10)
	b = append(b, `,"quantized":`...)
	b = strconv.AppendBool(b, m.Quantized)
	if m.Symmetric {
		b = append(b, `,"symmetric":true`...)
	}
	if withTensors {
		b = append(b, `,"tensors":`...)
		b = m.infos.appendJSON(b)
	}
	if m.InverseScale {
		b = append(b, `,"inverse_scale":true`...)
	}
	return append(b, '}')
}

// appendJSON writes the role → tensor name object with its keys sorted, as
// encoding/json writes a map (a module's roles are distinct).
func (r roleInfos) appendJSON(b []byte) []byte {
	if r == nil {
		return append(b, "null"...) // a Module not made by Group
	}
	var small [8]int
	order := small[:0]
	for i := range r {
		order = append(order, i)
	}
	slices.SortFunc(order, func(x, y int) int { return strings.Compare(r[x].Role, r[y].Role) })
	b = append(b, '{')
	for k, i := range order {
		if k > 0 {
			b = append(b, ',')
		}
		b = AppendJSONString(b, r[i].Role)
		b = append(b, ':')
		b = AppendJSONString(b, r[i].Name)
	}
	return append(b, '}')
}

// MarshalJSON is AppendJSON with the tensors, so that encoding/json writes
// the same.
func (m *Module) MarshalJSON() ([]byte, error) { return m.AppendJSON(nil, true), nil }

// AppendJSONString quotes s as encoding/json does; names of printable ASCII
// but for '"', '\\' and the HTML-escaped '<', '>', '&' (all of a repo's,
// as a rule) are copied as they are.
func AppendJSONString(b []byte, s string) []byte {
	if safetensors.PlainRunHTML(s, 0) < len(s) {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
