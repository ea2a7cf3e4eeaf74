package checkpoint

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
	"github.com/quantscope/quantscope/formats/scheme"
)

// The layer map: a checkpoint as a grid of rows (the embeddings, one row per
// decoder layer, extra layers such as DeepSeek's MTP layer, the head, and
// whatever sits outside the layers) by slots (q, k, v, o, gate, up, down,
// router, shared expert, routed experts, norms, ...; anatomy.Locate places
// each module). Each cell says what is stored there: the format(s), bytes,
// parameters and bits per weight. It is what shows at a glance which layers a
// quantizer kept in BF16.

// Rows of the layer map.
const (
	RowEmbedding = "embedding"   // embeddings outside the layers
	RowLayer     = "layer"       // a decoder layer (or a layer of another stack, named by Stack)
	RowExtra     = "extra_layer" // a layer at or past num_hidden_layers (an MTP layer)
	RowHead      = "head"        // the head and the final norm
	RowOther     = "other"       // modules outside the layers that are neither
)

// LayerSlots is the order of the layer map's columns. MLA's
// kv_a_proj_with_mqa and kv_b_proj have their own column, kv (they are
// neither k nor v); q_a_proj and q_b_proj both go under q.
var LayerSlots = []string{anatomy.SlotQ, anatomy.SlotK, anatomy.SlotV, anatomy.SlotKV, anatomy.SlotQKV, anatomy.SlotO,
	anatomy.SlotAttnOther, anatomy.SlotGate, anatomy.SlotUp, anatomy.SlotGateUp, anatomy.SlotDown, anatomy.SlotRouter,
	anatomy.SlotShared, anatomy.SlotExperts, anatomy.SlotNorm, anatomy.SlotEmbedding, anatomy.SlotHead, anatomy.SlotOther}

// FormatMixed is a cell's format when its modules are stored in more than one.
const FormatMixed = "mixed"

// LayerRow is one row of the layer map.
type LayerRow struct {
	Row   string `json:"row"`   // one of the Row constants
	Layer int    `json:"layer"` // the layer index; -1 for rows outside the layers
	// Stack is the name prefix of a layer stack other than the decoder's
	// (a vision tower's "model.vision_tower.encoder.layers"); empty for the decoder.
	Stack      string      `json:"stack,omitempty"`
	Bytes      uint64      `json:"bytes"`
	Parameters uint64      `json:"parameters"`
	Cells      []LayerCell `json:"cells"` // in LayerSlots order, only the slots that hold something
}

// LayerCell is what one row holds in one slot.
type LayerCell struct {
	Slot    string `json:"slot"`
	Format  string `json:"format"` // the stored format of every module here, or "mixed"
	Modules int    `json:"modules"`
	// Experts counts the distinct expert indices of a routed-experts cell
	// (256 in a DeepSeek-V3 layer, whose 768 modules are 256 × gate, up, down).
	Experts       int           `json:"experts,omitempty"`
	Bytes         uint64        `json:"bytes"`
	Parameters    uint64        `json:"parameters"`
	BitsPerWeight float64       `json:"bits_per_weight"`
	Formats       []FormatShare `json:"formats"` // largest bytes first
	// Pattern is a regular expression (RE2 and JavaScript alike) that
	// matches exactly the names of the cell's modules.
	Pattern string `json:"pattern"`
}

// FormatShare is the part of a cell stored in one format.
type FormatShare struct {
	Format     string `json:"format"`
	Modules    int    `json:"modules"`
	Bytes      uint64 `json:"bytes"`
	Parameters uint64 `json:"parameters"`
}

// numHiddenLayers reads config.json's decoder layer count (0 when unknown:
// then no layer counts as extra).
func numHiddenLayers(config []byte) int {
	m, err := anatomy.ParseModel(config)
	if err != nil {
		return 0
	}
	return m.NumHiddenLayers
}

// Layers builds the layer map of modules in a model of numHiddenLayers
// decoder layers (0 when unknown).
func Layers(modules []*scheme.Module, numHiddenLayers int) []LayerRow {
	type rowKey struct {
		row   string
		stack string
		layer int
	}
	type cellAcc struct {
		cell     LayerCell
		byFormat []FormatShare
		names    map[string]bool // name shapes → inside a layer
		experts  map[int]bool
	}
	// Modules whose names differ only in numbers after the layer's (experts)
	// sit in the same cell: place each shape once.
	type group struct {
		p     anatomy.Place
		stack string // the name before the layer number; empty outside the layers
		mods  []*scheme.Module
	}
	byShape := map[string]*group{}
	var shapes []string
	var buf []byte
	for _, m := range modules {
		buf = anatomy.AppendShape(buf[:0], m.Name)
		g := byShape[string(buf)] // no string made for a shape seen before
		if g == nil {
			shape := string(buf)
			g = &group{p: anatomy.Locate(shape, numHiddenLayers)}
			if g.p.Layer >= 0 {
				if at := anatomy.LayerPart(shape); at > 0 {
					g.stack = shape[:at-1]
				}
			}
			byShape[shape] = g
			shapes = append(shapes, shape)
		}
		g.mods = append(g.mods, m)
	}
	stackCount := map[string]int{}
	for _, g := range byShape {
		if g.stack != "" {
			stackCount[g.stack] += len(g.mods)
		}
	}
	decoder := "" // the stack with the most modules is the decoder's
	for s, n := range stackCount {
		if n > stackCount[decoder] || (n == stackCount[decoder] && s < decoder) {
			decoder = s
		}
	}
	rows := map[rowKey]map[string]*cellAcc{}
	for _, shape := range shapes {
		g := byShape[shape]
		k := rowKey{layer: -1}
		switch {
		case g.stack != "":
			k.layer = g.p.Layer
			k.row = RowLayer
			if g.stack != decoder {
				k.stack = g.stack
			} else if g.p.Extra {
				k.row = RowExtra
			}
		case g.p.Slot == anatomy.SlotEmbedding:
			k.row = RowEmbedding
		case g.p.Slot == anatomy.SlotHead || g.p.Slot == anatomy.SlotNorm:
			k.row = RowHead
		default:
			k.row = RowOther
		}
		cells := rows[k]
		if cells == nil {
			cells = map[string]*cellAcc{}
			rows[k] = cells
		}
		acc := cells[g.p.Slot]
		if acc == nil {
			acc = &cellAcc{cell: LayerCell{Slot: g.p.Slot}, names: map[string]bool{}, experts: map[int]bool{}}
			cells[g.p.Slot] = acc
		}
		acc.names[shape] = g.stack != ""
		experts := g.p.Slot == anatomy.SlotExperts && g.stack != ""
		for _, m := range g.mods {
			acc.cell.Modules++
			acc.cell.Bytes += m.Bytes
			acc.cell.Parameters += m.Parameters
			i := slices.IndexFunc(acc.byFormat, func(f FormatShare) bool { return f.Format == m.Format })
			if i < 0 {
				i = len(acc.byFormat)
				acc.byFormat = append(acc.byFormat, FormatShare{Format: m.Format})
			}
			fs := &acc.byFormat[i]
			fs.Modules++
			fs.Bytes += m.Bytes
			fs.Parameters += m.Parameters
			if experts {
				if e := expertIndex(m.Name[len(g.stack):]); e >= 0 {
					acc.experts[e] = true
				}
			}
		}
	}
	keys := make([]rowKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	order := map[string]int{RowEmbedding: 0, RowLayer: 1, RowExtra: 1, RowHead: 3, RowOther: 4}
	slices.SortFunc(keys, func(a, b rowKey) int {
		oa, ob := order[a.row], order[b.row]
		if a.stack != "" {
			oa = 2
		}
		if b.stack != "" {
			ob = 2
		}
		if oa != ob {
			return oa - ob
		}
		if c := strings.Compare(a.stack, b.stack); c != 0 {
			return c
		}
		return a.layer - b.layer
	})
	out := make([]LayerRow, 0, len(keys))
	for _, k := range keys {
		row := LayerRow{Row: k.row, Layer: k.layer, Stack: k.stack, Cells: []LayerCell{}}
		for _, slot := range LayerSlots {
			acc := rows[k][slot]
			if acc == nil {
				continue
			}
			c := acc.cell
			c.Formats = acc.byFormat
			slices.SortFunc(c.Formats, func(a, b FormatShare) int {
				if a.Bytes != b.Bytes {
					if a.Bytes > b.Bytes {
						return -1
					}
					return 1
				}
				return strings.Compare(a.Format, b.Format)
			})
			c.Format = c.Formats[0].Format
			if len(c.Formats) > 1 {
				c.Format = FormatMixed
			}
			if c.Parameters > 0 {
				c.BitsPerWeight = 8 * float64(c.Bytes) / float64(c.Parameters)
			}
			c.Experts = len(acc.experts)
			names := make([]string, 0, len(acc.names))
			for shape, layered := range acc.names {
				names = append(names, shapePattern(shape, layered))
			}
			slices.Sort(names)
			c.Pattern = "^(?:" + strings.Join(names, "|") + ")$"
			row.Bytes += c.Bytes
			row.Parameters += c.Parameters
			row.Cells = append(row.Cells, c)
		}
		out = append(out, row)
	}
	return out
}

// shapePattern is the regular expression of a name shape: the *s that
// stand for numbers after the layer's become \d+ (anatomy.Shape puts them
// only there), the rest is literal.
func shapePattern(shape string, layered bool) string {
	if !layered {
		return regexp.QuoteMeta(shape)
	}
	parts := strings.Split(shape, ".")
	for i, p := range parts {
		if p == "*" {
			parts[i] = `\d+`
		} else {
			parts[i] = regexp.QuoteMeta(p)
		}
	}
	return strings.Join(parts, `\.`)
}

// expertIndex finds the number after an "expert…" part of a name's rest
// (".mlp.experts.17.up_proj" → 17), or -1.
func expertIndex(rest string) int {
	i := strings.Index(rest, "expert")
	if i < 0 {
		return -1
	}
	rest = rest[i:]
	j := strings.IndexByte(rest, '.')
	if j < 0 {
		return -1
	}
	rest = rest[j+1:]
	if k := strings.IndexByte(rest, '.'); k >= 0 {
		rest = rest[:k]
	}
	if !isDigits(rest) {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
