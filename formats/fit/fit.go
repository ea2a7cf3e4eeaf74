// Package fit estimates the GPU memory needed to serve a checkpoint, from its
// safetensors headers and configs alone: the weights as stored (every
// tensor's bytes, scales included, not a format's nominal bits), split for
// tensor parallelism; the KV cache of GQA, MHA and MLA attention with
// sliding-window layers capped at their window and the KV dtype the
// checkpoint declares; runtime buffers the checkpoint does not show (GPT-
// QModel's W4A staged operands) and a reserve for activations; and, for each
// GPU asked, whether it fits, on how many GPUs, and the longest context that
// does.
//
// It is an estimate made the way vLLM lays a model out, and every choice it
// makes is returned as an assumption string. It does not read weights, run
// or profile anything, model a particular engine's allocator (block
// rounding, CUDA graphs, fragmentation), pipeline or data parallelism, draft
// models other than a checkpoint's own MTP layers, or a multimodal encoder's
// activations beyond the reserve.
package fit

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Module is what the estimate needs of one module of the checkpoint.
type Module struct {
	Name         string
	Bytes        uint64 // every tensor of the module: weight, scales, zero points, bias
	WeightParams uint64 // logical weight elements (bias excluded)
	Layout       string // scheme.Layout*
	Bits         int
	// W4A: GPT-QModel's W4A path can run the module (scheme.W4AReady, the
	// check the forward makes). W4ANot says why a GPTQ module cannot.
	W4A    bool
	W4ANot string
}

// Repo is a checkpoint as the estimate reads it.
type Repo struct {
	Source  string
	Commit  string // the commit read, when the source names one (hub.CommitSource)
	Config  []byte // config.json
	HFQuant []byte // hf_quant_config.json, nil when absent
	Modules []Module
	// OneFile: the source is one file of a repo (its other shards unread).
	OneFile bool
}

// FromCheckpoint takes what the estimate needs from a loaded checkpoint.
func FromCheckpoint(c *checkpoint.Checkpoint) Repo {
	r := Repo{Source: c.Source.Name(), Config: c.Config, HFQuant: c.HFQuant, Modules: make([]Module, 0, len(c.Modules))}
	if cs, ok := c.Source.(hub.CommitSource); ok {
		r.Commit = cs.ResolvedCommit()
	}
	if one, ok := c.Source.(hub.OneFile); ok && one.OneFile() {
		// model.safetensors is the name transformers gives a checkpoint it
		// does not shard: that one file is the whole repo.
		whole := c.Index == nil && len(c.Shards) == 1 && path.Base(c.Shards[0].Path) == "model.safetensors"
		r.OneFile = !whole
	}
	for _, m := range c.Modules {
		var p uint64
		if m.Format != scheme.FormatNone {
			p = 1
			for _, d := range m.WeightShape {
				p *= d
			}
		}
		rule, _ := scheme.W4AReady(m, c.Scheme)
		var not string // a short reason, for the note (none for a module that is no GPTQ one)
		switch rule {
		case "w4a-bits":
			not = fmt.Sprintf("%d bits", m.Bits)
		case "w4a-group":
			not = fmt.Sprintf("group %d", m.GroupSize)
		case "w4a-sym":
			not = "sym false"
		case "w4a-desc-act":
			not = "desc_act true"
		}
		r.Modules = append(r.Modules, Module{Name: m.Name, Bytes: m.Bytes, WeightParams: p, Layout: m.Layout, Bits: m.Bits, W4A: rule == "", W4ANot: not})
	}
	return r
}

// Options are the question asked.
type Options struct {
	TP      int    // tensor-parallel degree (default 1)
	Context int    // tokens a sequence (default: max_position_embeddings capped at DefaultContextCap)
	Batch   int    // sequences (default 1)
	MTP     bool   // load the layers past num_hidden_layers (MTP) and cache their KV
	W4A     string // "", "fp8" or "nvfp4": GPT-QModel's W4A staged operands of GPTQ INT4 weights
	KVDType string // override the KV dtype (bf16, fp16, fp32, fp8, int8)
	Reserve string // ParseReserve's forms; "" is DefaultReserve
	GPUs    []GPU  // default Catalog
}

// DefaultContextCap bounds the default context; DefaultContext is used when
// config.json states no max_position_embeddings.
const (
	DefaultContextCap = 32768
	DefaultContext    = 8192
	// contextLimitUnstated bounds max_context when the model states no limit,
	// maxContextLimit in any case (--context's own bound).
	contextLimitUnstated = 1 << 20
	maxContextLimit      = 1 << 26
)

// Counts are the TP degrees a verdict tries.
var Counts = []int{1, 2, 4, 8}

// Verdict is one GPU's answer.
type Verdict struct {
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"`
	// Count is the smallest TP degree of Counts that fits at the asked
	// context and batch (0: not even the largest).
	Count int `json:"count"`
	// Fits says whether the asked TP degree fits; NeedBytes is what one GPU
	// of it needs, UsableBytes what one GPU offers after the reserve.
	Fits        bool   `json:"fits"`
	NeedBytes   uint64 `json:"need_bytes"`
	UsableBytes uint64 `json:"usable_bytes"`
	// MaxContext is the longest context (at the asked batch and TP) that
	// fits, up to the model's max_position_embeddings; 0 when not even the
	// weights do.
	MaxContext int `json:"max_context"`
}

// Report is the estimate (fit --json).
type Report struct {
	Source string `json:"source"`
	Commit string `json:"commit,omitempty"` // the commit read (a local folder has none)
	// WeightsBytes is what is loaded: every tensor, less the layers past
	// num_hidden_layers unless MTP is asked. StoredBytes is every tensor.
	WeightsBytes      uint64            `json:"weights_bytes"`
	StoredBytes       uint64            `json:"stored_bytes"`
	ExtraLayers       int               `json:"extra_layers"`
	ExtraLayerBytes   uint64            `json:"extra_layer_bytes"`
	BytesBySplit      map[string]uint64 `json:"bytes_by_split"` // loaded bytes by anatomy.Split*
	PerGPUWeightBytes uint64            `json:"per_gpu_weight_bytes"`
	// StagedBytes are runtime copies of the weights (W4A), PerGPU at the asked TP.
	StagedBytes       uint64 `json:"staged_bytes"`
	PerGPUStagedBytes uint64 `json:"per_gpu_staged_bytes"`

	Attention string `json:"attention"` // gqa | mha | mla
	KVDType   string `json:"kv_dtype"`
	KVLayers  int    `json:"kv_layers"`
	// SlidingLayers of KVLayers hold at most Window tokens.
	SlidingLayers int `json:"sliding_layers"`
	Window        int `json:"window"`
	// KVBytesPerToken sums every cached layer (a token within every window);
	// KVBytes is the cache for Context × Batch on one GPU at TP 1, and
	// PerGPUKVBytes on one GPU at the asked TP.
	KVBytesPerToken uint64 `json:"kv_bytes_per_token"`
	KVBytes         uint64 `json:"kv_bytes"`
	PerGPUKVBytes   uint64 `json:"per_gpu_kv_bytes"`

	Context         int     `json:"context"`
	Batch           int     `json:"batch"`
	TP              int     `json:"tp"`
	MaxPosition     int     `json:"max_position_embeddings"`
	ReserveFraction float64 `json:"reserve_fraction"`
	ReserveBytes    uint64  `json:"reserve_bytes"` // a fixed reserve a GPU (instead of the fraction)

	// TPRefused says why the asked TP degree cannot run the model at all
	// (it does not divide the attention heads); "" when it can.
	TPRefused string `json:"tp_refused,omitempty"`
	// ContextRefused says why the asked context cannot be served at all
	// (past max_position_embeddings, which vLLM refuses as max_model_len):
	// then no GPU fits, whatever its memory.
	ContextRefused string `json:"context_refused,omitempty"`

	Assumptions []string  `json:"assumptions"`
	GPUs        []Verdict `json:"gpus"`
}

// placed is a module where anatomy puts it; n counts the modules alike
// (the experts of a layer are thousands of one shape).
type placed struct {
	bytes, params uint64
	split         string
	slot          string
	extra         bool
	w4a           bool
	n             uint64
}

// Plan is a repo read once (its config parsed, every module placed) for any
// number of estimates: the page asks again at each move of a control.
type Plan struct {
	source      string
	commit      string
	config      []byte
	hfQuant     []byte
	model       *anatomy.Model
	mods        []placed
	extraLayers int
	stored      uint64
	extraBytes  uint64
	// w4aNot counts the GPTQ modules W4A cannot run; w4aNotFirst names
	// the first and why.
	w4aNot      int
	w4aNotFirst string
}

// Prepare reads a repo for Estimate.
func Prepare(r Repo) (*Plan, error) {
	if r.OneFile {
		return nil, fmt.Errorf("%s: rule fit-whole-repo: one file of a repo; the estimate counts every shard's weights: give the repo's folder or ORG/NAME", r.Source)
	}
	if len(r.Config) == 0 {
		return nil, fmt.Errorf("%s: config.json: rule fit-config: the repo has no config.json, so the KV cache cannot be sized", r.Source)
	}
	m, err := anatomy.ParseModel(r.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source, err)
	}
	if err := checkModel(m); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source, err)
	}
	pl := &Plan{source: r.Source, commit: r.Commit, config: r.Config, hfQuant: r.HFQuant, model: m}
	extra := map[int]bool{}
	index := map[placed]int{}
	for _, mod := range r.Modules {
		if mod.W4ANot != "" {
			if pl.w4aNot++; pl.w4aNotFirst == "" {
				pl.w4aNotFirst = mod.Name + ": " + mod.W4ANot
			}
		}
		p := anatomy.Locate(mod.Name, m.NumHiddenLayers)
		pm := placed{bytes: mod.Bytes, params: mod.WeightParams, split: p.Split, slot: p.Slot, extra: p.Extra,
			w4a: mod.W4A}
		if i, ok := index[pm]; ok {
			pl.mods[i].n++
		} else {
			index[pm] = len(pl.mods)
			pm.n = 1
			pl.mods = append(pl.mods, pm)
		}
		pl.stored += mod.Bytes
		if p.Extra {
			extra[p.Layer] = true
			pl.extraBytes += mod.Bytes
		}
	}
	pl.extraLayers = len(extra)
	return pl, nil
}

type estimator struct {
	mods    []placed
	wcache  map[int]uint64 // weightsPerGPU by TP degree
	kv      *kvPlan
	staged  func(params uint64) uint64 // nil without W4A
	mtp     bool
	frac    float64
	fixed   uint64
	heads   int
	qkvFrac [2]uint64 // fused QKV: q heads, kv heads × 2
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

func (e *estimator) loaded(m placed) bool { return !m.extra || e.mtp }

func (e *estimator) usable(g GPU) uint64 {
	r := e.fixed
	if r == 0 {
		r = uint64(float64(g.MemoryBytes)*e.frac + 0.5)
	}
	if r >= g.MemoryBytes {
		return 0
	}
	return g.MemoryBytes - r
}

// need is one GPU's memory at TP n.
func (e *estimator) need(n, ctx, batch int) uint64 {
	return addSat(e.weightsPerGPU(n)+e.stagedPerGPU(n), e.kv.bytes(n, ctx, batch))
}

// maxContext is the longest context ≤ limit that fits in usable at TP n.
func (e *estimator) maxContext(n, batch int, usable uint64, limit int) int {
	base := e.weightsPerGPU(n) + e.stagedPerGPU(n)
	if base > usable || e.kv.bytes(n, 1, batch) > usable-base {
		return 0
	}
	lo, hi := 1, limit // lo fits
	if e.kv.bytes(n, hi, batch) <= usable-base {
		return hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if e.kv.bytes(n, mid, batch) <= usable-base {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// counts are the ranges of fit's whole-number options, with their units.
var counts = map[string]struct {
	lo, hi int
	unit   string
}{"tp": {1, 1024, "GPUs a replica"}, "batch": {1, 1 << 20, "sequences"}, "context": {1, 1 << 26, "tokens"}}

// CheckCount checks one of fit's whole-number options (tp, batch, context)
// as given: a command line refuses a typed 0 with it, which Options reads as
// the default.
func CheckCount(name string, v int) error {
	c := counts[name]
	if v < c.lo || v > c.hi {
		return fmt.Errorf("--%s %d: want %d to %d %s", name, v, c.lo, c.hi, c.unit)
	}
	return nil
}

// Check fills in the defaults (TP 1, batch 1) and rejects impossible
// options, so a command line can refuse them before reading a repo.
func (o *Options) Check() error {
	if o.TP == 0 {
		o.TP = 1
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if err := CheckCount("tp", o.TP); err != nil {
		return err
	}
	if err := CheckCount("batch", o.Batch); err != nil {
		return err
	}
	if o.Context != 0 { // 0: the config's context
		if err := CheckCount("context", o.Context); err != nil {
			return err
		}
	}
	switch o.W4A {
	case "", "fp8", "nvfp4":
	default:
		return fmt.Errorf("--w4a %q: want fp8 or nvfp4", o.W4A)
	}
	if o.KVDType != "" {
		_, e, ok := dtypeBytes(o.KVDType)
		if !ok {
			_, e = algoBytes(o.KVDType)
		}
		if e == 0 {
			return fmt.Errorf("--kv-dtype %q: want bf16, fp16, fp32, fp8 (fp8_e4m3, fp8_e5m2) or int8; vLLM's auto is the model's dtype: leave the flag out", o.KVDType)
		}
	}
	seen := map[string]uint64{}
	for _, g := range o.GPUs {
		if m, dup := seen[squash(g.Name)]; dup {
			return fmt.Errorf("--gpu %q: a second GPU of that name (%s and %s): its rows would not be told apart; name it otherwise, e.g. %s-%s:%s", g.Name, HumanGB(m), HumanGB(g.MemoryBytes), g.Name, gpuSize(g.MemoryBytes), gpuSize(g.MemoryBytes))
		}
		seen[squash(g.Name)] = g.MemoryBytes
	}
	_, _, err := reserveOf(o.Reserve)
	return err
}

// gpuSize writes a GPU's memory as --gpu takes it: whole GiB when it is
// some, else decimal GB.
func gpuSize(b uint64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGiB", b>>30)
	}
	return strconv.FormatFloat(float64(b)/GB, 'f', -1, 64) + "GB"
}

// Estimate answers the question for a repo.
func Estimate(r Repo, o Options) (*Report, error) {
	pl, err := Prepare(r)
	if err != nil {
		return nil, err
	}
	return pl.Estimate(o)
}

// Estimate answers the question for the prepared repo.
func (pl *Plan) Estimate(o Options) (*Report, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	m, r := pl.model, Repo{Source: pl.source, HFQuant: pl.hfQuant}
	rep := &Report{Source: r.Source, Commit: pl.commit, TP: o.TP, Batch: o.Batch, MaxPosition: m.MaxPosition, BytesBySplit: map[string]uint64{}}
	var notes []string
	e := &estimator{mods: pl.mods, wcache: map[int]uint64{}, mtp: o.MTP, heads: m.NumAttentionHeads}
	var err error
	if rep.ReserveFraction, rep.ReserveBytes, err = reserveOf(o.Reserve); err != nil {
		return nil, err
	}
	e.frac, e.fixed = rep.ReserveFraction, rep.ReserveBytes

	// Weights.
	var w4aParams uint64
	rep.StoredBytes, rep.ExtraLayerBytes, rep.ExtraLayers = pl.stored, pl.extraBytes, pl.extraLayers
	for _, pm := range pl.mods {
		if e.loaded(pm) {
			rep.WeightsBytes += pm.n * pm.bytes
			rep.BytesBySplit[pm.split] += pm.n * pm.bytes
			if pm.w4a {
				w4aParams += pm.n * pm.params
			}
		}
	}
	if o.MTP && rep.ExtraLayers == 0 {
		return nil, fmt.Errorf("%s: --mtp: rule fit-mtp: no module sits past num_hidden_layers %d, so there is no MTP layer to load", r.Source, m.NumHiddenLayers)
	}
	notes = append(notes, "weights: the bytes every loaded tensor stores (scales, zero points and biases included), not a format's nominal bits")
	if rep.ExtraLayers > 0 {
		if o.MTP {
			notes = append(notes, fmt.Sprintf("--mtp: the %d layer(s) past num_hidden_layers %d (%s) are loaded and their KV cached like a full-attention layer", rep.ExtraLayers, m.NumHiddenLayers, HumanGB(rep.ExtraLayerBytes)))
		} else {
			notes = append(notes, fmt.Sprintf("the %d layer(s) past num_hidden_layers %d (MTP, %s stored) are neither loaded nor cached: vLLM skips them unless speculative decoding uses them (--mtp counts them)", rep.ExtraLayers, m.NumHiddenLayers, HumanGB(rep.ExtraLayerBytes)))
		}
	}

	// KV cache.
	extra := 0
	if o.MTP {
		extra = rep.ExtraLayers
	}
	sliding, how := slidingLayers(pl.config, m)
	if how != "" {
		notes = append(notes, how)
	}
	if e.kv, err = planKV(m, sliding, r.HFQuant, extra, o.KVDType, &notes); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source, err)
	}
	e.qkvFrac = [2]uint64{uint64(max(m.NumAttentionHeads, 0)), 2 * uint64(max(e.kv.kvHeads, 0))}
	rep.Attention, rep.KVDType, rep.KVLayers = e.kv.attention, e.kv.dtype, len(e.kv.layers)
	rep.SlidingLayers, rep.Window = e.kv.sliding, e.kv.window
	if rep.SlidingLayers == 0 {
		rep.Window = 0
	}
	rep.KVBytesPerToken = e.kv.perToken(1)

	// Context.
	limit := min(m.MaxPosition, maxContextLimit)
	if limit <= 0 {
		limit = contextLimitUnstated
		notes = append(notes, fmt.Sprintf("config.json states no max_position_embeddings: max_context searched up to %d tokens", limit))
	}
	switch {
	case o.Context > 0:
		rep.Context = o.Context
		if m.MaxPosition > 0 && o.Context > m.MaxPosition {
			rep.ContextRefused = fmt.Sprintf("it is past max_position_embeddings %d, which vLLM refuses as max_model_len", m.MaxPosition)
		}
	case m.MaxPosition > 0:
		rep.Context = min(m.MaxPosition, DefaultContextCap)
		if m.MaxPosition > DefaultContextCap {
			notes = append(notes, fmt.Sprintf("context %d: max_position_embeddings %d capped at %d by default (--context asks for another)", rep.Context, m.MaxPosition, DefaultContextCap))
		}
	default:
		rep.Context = DefaultContext
		notes = append(notes, fmt.Sprintf("context %d by default: config.json states no max_position_embeddings", DefaultContext))
	}
	rep.KVBytes = e.kv.bytes(1, rep.Context, rep.Batch)

	// Runtime extras.
	if o.W4A != "" {
		if w4aParams == 0 {
			return nil, fmt.Errorf("%s: --w4a %s: rule fit-w4a: no module W4A can run (it runs GPT-QModel's GPTQ INT4 weights, group 128, symmetric, desc_act false)", r.Source, o.W4A)
		}
		if o.W4A == "fp8" {
			e.staged = func(p uint64) uint64 { return p }
		} else {
			e.staged = func(p uint64) uint64 { return ceilDiv(17*p, 8) }
		}
		rep.StagedBytes = e.stagedPerGPU(1)
		if o.W4A == "fp8" {
			notes = append(notes, fmt.Sprintf("W4A-FP8: GPT-QModel keeps an E4M3 copy of every INT4 weight besides the GPTQ buffers, 1 byte a weight parameter (%s)", HumanGB(rep.StagedBytes)))
		} else {
			notes = append(notes, fmt.Sprintf("W4A-NVFP4: GPT-QModel keeps two E2M1 planes (2 × ½ byte) with their unit E4M3 block-16 scales (2 × 1/16 byte) and the E4M3 copy (1 byte) of every INT4 weight, 2.125 bytes a weight parameter (%s)", HumanGB(rep.StagedBytes)))
		}
		if pl.w4aNot > 0 {
			notes = append(notes, fmt.Sprintf("W4A: %d GPTQ module(s) it cannot run (W4A takes INT4, group 128, symmetric, desc_act false; %s) counted without staged copies; quantscope's own forward refuses --w4a on such a model",
				pl.w4aNot, pl.w4aNotFirst))
		}
	}
	if rep.ReserveBytes > 0 {
		notes = append(notes, fmt.Sprintf("%s of each GPU held back for activations, CUDA graphs and workspace (--reserve)", HumanGB(rep.ReserveBytes)))
	} else {
		how := "as vLLM's default gpu_memory_utilization 0.9 leaves; --reserve changes it"
		if o.Reserve != "" {
			how = "--reserve"
		}
		notes = append(notes, fmt.Sprintf("%g%% of each GPU held back for activations, CUDA graphs and workspace (%s)", 100*rep.ReserveFraction, how))
	}

	// Tensor parallelism.
	rep.PerGPUWeightBytes = e.weightsPerGPU(o.TP)
	rep.PerGPUStagedBytes = e.stagedPerGPU(o.TP)
	rep.PerGPUKVBytes = e.kv.bytes(o.TP, rep.Context, rep.Batch)
	notes = append(notes, tpNotes(e, o.TP)...)
	if !e.divisible(o.TP) {
		rep.TPRefused = fmt.Sprintf("it does not divide %s, which vLLM refuses", e.headsText())
	}
	notes = append(notes, "GPU memory as vendors state it, in decimal GB (10^9 bytes)")

	gpus := o.GPUs
	if len(gpus) == 0 {
		gpus = Catalog
	}
	var consumed []string
	for _, g := range gpus {
		if rep.ReserveBytes >= g.MemoryBytes {
			consumed = append(consumed, fmt.Sprintf("%s (%s)", g.Name, HumanGB(g.MemoryBytes)))
		}
	}
	if len(consumed) > 0 {
		notes = append(notes, fmt.Sprintf("the --reserve of %s is all the memory of %s: nothing is left there for the model", HumanGB(rep.ReserveBytes), strings.Join(consumed, ", ")))
	}
	for _, g := range gpus {
		v := Verdict{Name: g.Name, MemoryBytes: g.MemoryBytes, UsableBytes: e.usable(g)}
		v.NeedBytes = e.need(o.TP, rep.Context, rep.Batch)
		v.Fits = v.NeedBytes <= v.UsableBytes && e.divisible(o.TP) && rep.ContextRefused == ""
		if e.divisible(o.TP) {
			v.MaxContext = e.maxContext(o.TP, rep.Batch, v.UsableBytes, limit)
		}
		for _, n := range Counts {
			if rep.ContextRefused != "" {
				break // no count of GPUs serves it
			}
			if e.divisible(n) && e.need(n, rep.Context, rep.Batch) <= v.UsableBytes {
				v.Count = n
				break
			}
		}
		rep.GPUs = append(rep.GPUs, v)
	}
	rep.Assumptions = notes
	return rep, nil
}

func reserveOf(s string) (float64, uint64, error) {
	if s == "" {
		return DefaultReserve, 0, nil
	}
	return ParseReserve(s)
}

// HumanGB writes bytes as decimal GB (MB below 0.1 GB).
func HumanGB(b uint64) string {
	switch {
	case b >= GB/10:
		return fmt.Sprintf("%.2f GB", float64(b)/GB)
	case b >= 1_000_000:
		return fmt.Sprintf("%.1f MB", float64(b)/1e6)
	case b >= 1000:
		return fmt.Sprintf("%.1f kB", float64(b)/1e3)
	}
	return fmt.Sprintf("%d B", b)
}
