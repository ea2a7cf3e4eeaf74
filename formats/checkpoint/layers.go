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
		byFormat map[string]*FormatShare
		names    map[string]bool // name patterns
		experts  map[string]bool
	}
	rows := map[rowKey]map[string]*cellAcc{}
	stackCount := map[string]int{}
	type placed struct {
		m      *scheme.Module
		p      anatomy.Place
		stack  string
		at     int // index of the layer number among the name's dotted parts
		dotted []string
	}
	all := make([]placed, 0, len(modules))
	for _, m := range modules {
		p := anatomy.Locate(m.Name, numHiddenLayers)
		pl := placed{m: m, p: p, at: -1}
		if p.Layer >= 0 {
			pl.dotted = strings.Split(m.Name, ".")
			pl.at = layerAt(pl.dotted)
			if pl.at > 0 {
				pl.stack = strings.Join(pl.dotted[:pl.at], ".")
				stackCount[pl.stack]++
			}
		}
		all = append(all, pl)
	}
	decoder := "" // the stack with the most modules is the decoder's
	for s, n := range stackCount {
		if n > stackCount[decoder] || (n == stackCount[decoder] && s < decoder) {
			decoder = s
		}
	}
	for _, pl := range all {
		k := rowKey{layer: -1}
		switch {
		case pl.p.Layer >= 0 && pl.at > 0:
			k.layer = pl.p.Layer
			k.row = RowLayer
			if pl.stack != decoder {
				k.stack = pl.stack
			} else if pl.p.Extra {
				k.row = RowExtra
			}
		case pl.p.Slot == anatomy.SlotEmbedding:
			k.row = RowEmbedding
		case pl.p.Slot == anatomy.SlotHead || pl.p.Slot == anatomy.SlotNorm:
			k.row = RowHead
		default:
			k.row = RowOther
		}
		cells := rows[k]
		if cells == nil {
			cells = map[string]*cellAcc{}
			rows[k] = cells
		}
		acc := cells[pl.p.Slot]
		if acc == nil {
			acc = &cellAcc{cell: LayerCell{Slot: pl.p.Slot}, byFormat: map[string]*FormatShare{}, names: map[string]bool{}, experts: map[string]bool{}}
			cells[pl.p.Slot] = acc
		}
		m := pl.m
		acc.cell.Modules++
		acc.cell.Bytes += m.Bytes
		acc.cell.Parameters += m.Parameters
		fs := acc.byFormat[m.Format]
		if fs == nil {
			fs = &FormatShare{Format: m.Format}
			acc.byFormat[m.Format] = fs
		}
		fs.Modules++
		fs.Bytes += m.Bytes
		fs.Parameters += m.Parameters
		if pl.at > 0 { // numbers after the layer's (expert indices) become \d+
			var b strings.Builder
			for i, part := range pl.dotted {
				if i > 0 {
					b.WriteString(`\.`)
				}
				if i > pl.at && isDigits(part) {
					b.WriteString(`\d+`)
					if pl.p.Slot == anatomy.SlotExperts && i > 0 && strings.Contains(pl.dotted[i-1], "expert") {
						acc.experts[part] = true
					}
				} else {
					b.WriteString(regexp.QuoteMeta(part))
				}
			}
			acc.names[b.String()] = true
		} else {
			acc.names[regexp.QuoteMeta(m.Name)] = true
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
			for _, fs := range acc.byFormat {
				c.Formats = append(c.Formats, *fs)
			}
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
			for n := range acc.names {
				names = append(names, n)
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

// layerAt finds the dotted part holding the layer number, as anatomy does:
// the number after the first layers-like part.
func layerAt(parts []string) int {
	for i := 0; i+1 < len(parts); i++ {
		switch strings.ToLower(parts[i]) {
		case "layers", "h", "blocks", "layer", "decoder_layers":
			if v, err := strconv.Atoi(parts[i+1]); err == nil && v >= 0 {
				return i + 1
			}
		}
	}
	return -1
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
