package checkpoint

import (
	"slices"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Summary is the inventory's headline numbers.
type Summary struct {
	Files            int               `json:"files"`   // safetensors shards
	Tensors          int               `json:"tensors"` // tensors across all shards
	Bytes            uint64            `json:"bytes"`   // tensor data bytes, headers excluded
	HeaderBytes      uint64            `json:"header_bytes"`
	BytesByDType     map[string]uint64 `json:"bytes_by_dtype"`
	BytesByFormat    map[string]uint64 `json:"bytes_by_format"` // module bytes (scales included) by the module's format; a bias under its own dtype, as in parameters_by_format
	BytesByKind      map[string]uint64 `json:"bytes_by_kind"`   // experts, attention, mlp, embedding, norm, head, other
	Parameters       uint64            `json:"parameters"`      // modules' parameters, biases included
	BiasParameters   uint64            `json:"bias_parameters"` // the part of Parameters in biases
	ParamsByFormat   map[string]uint64 `json:"parameters_by_format"`
	BitsPerWeight    float64           `json:"bits_per_weight"`
	Modules          int               `json:"modules"`
	QuantizedModules int               `json:"quantized_modules"`
	Errors           int               `json:"errors"`
	Warnings         int               `json:"warnings"`
}

// TensorEntry is one tensor as the inventory lists it.
type TensorEntry struct {
	Name        string    `json:"name"`
	File        string    `json:"file"`
	DType       string    `json:"dtype"`
	Shape       []uint64  `json:"shape"`
	DataOffsets [2]uint64 `json:"data_offsets"`
	Module      string    `json:"module"`
	Role        string    `json:"role"`
}

// Inventory is the inspect --json document.
type Inventory struct {
	Source string `json:"source"`
	// Commit is the commit SOURCE's revision named when it was read (a
	// hub's X-Repo-Commit, a cache snapshot's); "" for a local folder.
	Commit   string           `json:"commit,omitempty"`
	Summary  Summary          `json:"summary"`
	Scheme   *scheme.Scheme   `json:"scheme"`
	Modules  []*scheme.Module `json:"modules"`
	Tensors  []TensorEntry    `json:"tensors"`
	Findings []scheme.Finding `json:"findings"`
	Files    []hub.File       `json:"files"`
	Fetch    hub.Stats        `json:"fetch"`

	// Forward is what the companion's forward can run on the repo.
	Forward ForwardInfo `json:"forward"`

	// Layers is the layer map: per row (embeddings, each decoder layer, extra
	// layers, head, other) and slot, the stored formats, bytes and parameters.
	Layers []LayerRow `json:"layers"`

	// OmitModuleTensors makes WriteJSON leave out modules[].tensors.
	OmitModuleTensors bool `json:"-"`

	// streamFrom, set by InventoryStreamed, is where WriteJSON reads
	// tensors[] from while Tensors stays nil.
	streamFrom *Checkpoint
}

// InventoryStreamed is Inventory for WriteJSON alone: tensors[] is written
// straight from the checkpoint instead of being built first (on a repo of
// 180,000 tensors a 21 MB slice, nearly all of it fresh pages). Its
// Tensors field stays nil; WriteJSON writes the same document Inventory's
// would.
func (c *Checkpoint) InventoryStreamed() *Inventory {
	inv := c.inventory(false)
	inv.streamFrom = c
	return inv
}

// eachTensor calls f with each tensor as Inventory lists it, in its order.
func (c *Checkpoint) eachTensor(f func(*TensorEntry)) {
	var e TensorEntry
	for i := range c.tensors {
		c.tensorEntry(i, &e)
		f(&e)
	}
}

func (c *Checkpoint) tensorEntry(i int, e *TensorEntry) {
	t, loc := &c.tensors[i], c.locs[i]
	*e = TensorEntry{Name: t.Name, File: loc.shard.Path, DType: t.DType.String(), Shape: t.Shape,
		DataOffsets: [2]uint64{loc.t.Begin, loc.t.End}, Module: t.Module, Role: t.Role}
}

// Inventory summarises the checkpoint.
func (c *Checkpoint) Inventory() *Inventory { return c.inventory(true) }

// InventoryWithoutTensors is Inventory with tensors[] left nil (the summary
// still counts them): what a view that lists modules needs, at a fraction
// of the work on a repo of 180,000 tensors.
func (c *Checkpoint) InventoryWithoutTensors() *Inventory { return c.inventory(false) }

func (c *Checkpoint) inventory(withTensors bool) *Inventory {
	inv := &Inventory{
		Source:   c.Source.Name(),
		Scheme:   c.Scheme,
		Modules:  c.Modules,
		Findings: slices.Clone(c.Findings),
		Files:    c.Files,
		Layers:   Layers(c.Modules, numHiddenLayers(c.Config)),
		Forward:  c.Forward(),
	}
	if inv.Findings == nil {
		inv.Findings = []scheme.Finding{}
	}
	s := &inv.Summary
	s.Files = len(c.Shards)
	s.BytesByDType = map[string]uint64{}
	s.BytesByFormat = map[string]uint64{}
	s.BytesByKind = map[string]uint64{}
	s.ParamsByFormat = map[string]uint64{}
	if withTensors {
		inv.Tensors = make([]TensorEntry, 0, len(c.tensors))
	}
	for _, m := range c.Modules {
		s.Modules++
		if m.Quantized {
			s.QuantizedModules++
		}
		s.Parameters += m.Parameters
		s.BiasParameters += m.BiasParameters
		m.AddParametersByFormat(s.ParamsByFormat)
		m.AddBytesByFormat(s.BytesByFormat)
		s.BytesByKind[m.Kind] += m.Bytes
	}
	for _, sh := range c.Shards {
		s.HeaderBytes += uint64(sh.Header.DataStart())
	}
	for i := range c.tensors { // in shard then data order, duplicates left out
		t := &c.tensors[i]
		s.Tensors++
		s.Bytes += t.NBytes
		s.BytesByDType[t.DType.String()] += t.NBytes
		if !withTensors {
			continue
		}
		inv.Tensors = append(inv.Tensors, TensorEntry{})
		c.tensorEntry(i, &inv.Tensors[len(inv.Tensors)-1])
	}
	if s.Parameters > 0 {
		s.BitsPerWeight = 8 * float64(s.Bytes) / float64(s.Parameters)
	}
	for _, f := range inv.Findings {
		switch f.Severity {
		case scheme.SeverityError:
			s.Errors++
		case scheme.SeverityWarning:
			s.Warnings++
		}
	}
	if st, ok := c.Source.(hub.StatsSource); ok {
		inv.Fetch = st.Stats()
	}
	if cs, ok := c.Source.(hub.CommitSource); ok {
		inv.Commit = cs.ResolvedCommit()
	}
	return inv
}
