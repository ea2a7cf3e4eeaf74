package fit

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// load writes a generated repo and reads it back as fit reads a checkpoint.
func load(t *testing.T, r *synth.Repo) Repo {
	return loadFile(t, r, "")
}

// loadFile is load of one file of the repo ("" for the whole repo).
func loadFile(t *testing.T, r *synth.Repo, file string) Repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	src, err := hub.OpenLocal(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{ReadShapeTensors: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return FromCheckpoint(c)
}

func estimate(t *testing.T, r Repo, o Options) *Report {
	t.Helper()
	rep, err := Estimate(r, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func hasNote(t *testing.T, rep *Report, subs ...string) {
	t.Helper()
	for _, n := range rep.Assumptions {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(n, s)
		}
		if ok {
			return
		}
	}
	t.Errorf("no assumption mentions %q in %q", subs, rep.Assumptions)
}

// TestGQA: a Llama-shaped BF16 repo with 4 heads, 2 KV heads and an explicit
// head_dim 48, at TP 1, 2 and 4 (4 > KV heads: the KV heads are copied).
func TestGQA(t *testing.T) {
	d := synth.FitLlamaDims
	r := load(t, synth.FitLlamaGQA())
	// Every tensor is BF16: 2 bytes an element.
	embed := 2 * d.Vocab * d.Hidden // and lm_head
	norm := 2 * d.Hidden
	q := 2 * d.Heads * d.HeadDim * d.Hidden // and o
	k := 2 * d.KVHeads * d.HeadDim * d.Hidden
	mlp := 2 * d.Inter * d.Hidden // each of gate, up, down
	layer := 2*norm + 2*q + 2*k + 3*mlp
	total := 2*embed + norm + d.Layers*layer
	replicated := norm + d.Layers*2*norm

	rep := estimate(t, r, Options{})
	eq(t, "weights_bytes", rep.WeightsBytes, uint64(total))
	eq(t, "stored_bytes", rep.StoredBytes, uint64(total))
	eq(t, "per_gpu_weight_bytes tp1", rep.PerGPUWeightBytes, uint64(total))
	eq(t, "attention", rep.Attention, "gqa")
	eq(t, "kv_dtype", rep.KVDType, "bf16")
	perLayer := 2 * d.KVHeads * d.HeadDim * 2 // K and V, 2 bytes
	eq(t, "kv_bytes_per_token", rep.KVBytesPerToken, uint64(d.Layers*perLayer))
	eq(t, "context (max_position_embeddings)", rep.Context, d.MaxPos)
	eq(t, "kv_bytes", rep.KVBytes, uint64(d.Layers*perLayer*d.MaxPos))
	eq(t, "bytes_by_split replicated", rep.BytesBySplit["replicated"], uint64(replicated))
	eq(t, "bytes_by_split vocab", rep.BytesBySplit["vocab"], uint64(2*embed))
	eq(t, "bytes_by_split column", rep.BytesBySplit["column"], uint64(d.Layers*(q+2*k+2*mlp)))
	eq(t, "bytes_by_split row", rep.BytesBySplit["row"], uint64(d.Layers*(q+mlp)))

	rep = estimate(t, r, Options{TP: 2, Context: 1000, Batch: 3})
	eq(t, "per_gpu_weight_bytes tp2", rep.PerGPUWeightBytes, uint64(replicated+(total-replicated)/2))
	eq(t, "kv_bytes tp1", rep.KVBytes, uint64(d.Layers*perLayer*1000*3))
	eq(t, "per_gpu_kv_bytes tp2 (1 KV head a GPU)", rep.PerGPUKVBytes, uint64(d.Layers*perLayer/2*1000*3))
	hasNote(t, rep, "2 KV heads divided, 1 a GPU")

	// TP 4 > 2 KV heads: k and v projections are divided by 2, not 4, and
	// each GPU caches one KV head.
	rep = estimate(t, r, Options{TP: 4})
	perGPU := replicated + 2*embed/4 + d.Layers*(2*q/4+2*k/2+3*mlp/4)
	eq(t, "per_gpu_weight_bytes tp4", rep.PerGPUWeightBytes, uint64(perGPU))
	eq(t, "per_gpu_kv_bytes tp4", rep.PerGPUKVBytes, uint64(d.Layers*2*1*d.HeadDim*2*d.MaxPos))
	hasNote(t, rep, "fewer KV heads (2) than GPUs", "replicated")

	// A 3 MB GPU with the default 10% reserve: 2.7 MB usable.
	rep = estimate(t, r, Options{GPUs: []GPU{{"tiny", 3_000_000}}})
	v := rep.GPUs[0]
	usable := 3_000_000 - 300_000
	eq(t, "usable", v.UsableBytes, uint64(usable))
	tp4Need := perGPU + d.Layers*2*d.HeadDim*2*d.MaxPos
	eq(t, "tp4 fits in 2.7 MB", tp4Need <= usable, true)
	eq(t, "tp2 does not", replicated+(total-replicated)/2+d.Layers*perLayer/2*d.MaxPos > usable, true)
	eq(t, "count", v.Count, 4)
	eq(t, "fits at tp 1", v.Fits, false)
	eq(t, "need tp1", v.NeedBytes, uint64(total+d.Layers*perLayer*d.MaxPos))
	eq(t, "max_context tp1", v.MaxContext, (usable-total)/(d.Layers*perLayer))
	hasNote(t, rep, "10% of each GPU held back", "gpu_memory_utilization 0.9")
}

// TestMLA: a DeepSeek-V3-shaped BF16 repo with one MTP layer past
// num_hidden_layers, with and without --mtp, at TP 1 and 2.
func TestMLA(t *testing.T) {
	d := synth.FitDeepSeekDims
	r := load(t, synth.FitDeepSeekMTP())
	m := func(out, in int) int { return 2 * out * in } // BF16 [out, in]
	norms := 2*2*d.Hidden + 2*d.QLora + 2*d.KVLora     // input, post-attention, q_a and kv_a layernorms
	qa, kva := m(d.QLora, d.Hidden), m(d.KVLora+d.Rope, d.Hidden)
	attnSplit := m(d.Heads*(d.Nope+d.Rope), d.QLora) + m(d.Heads*(d.Nope+d.VHead), d.KVLora) + m(d.Hidden, d.Heads*d.VHead)
	attn := norms + qa + kva + attnSplit
	dense := 3 * m(d.Inter, d.Hidden)
	router := m(d.Experts, d.Hidden)
	experts := d.Experts * 3 * m(d.MoEInter, d.Hidden)
	shared := 3 * m(d.MoEInter, d.Hidden)
	layer0 := attn + dense
	moeLayer := attn + router + experts + shared
	embed := m(d.Vocab, d.Hidden)
	loaded := 2*embed + 2*d.Hidden + layer0 + moeLayer
	mtpOwn := embed + 2*2*d.Hidden + m(d.Hidden, 2*d.Hidden) + 2*d.Hidden + embed // embed_tokens, enorm, hnorm, eh_proj, shared_head.norm/head
	mtp := mtpOwn + moeLayer

	rep := estimate(t, r, Options{})
	eq(t, "attention", rep.Attention, "mla")
	eq(t, "weights_bytes (MTP not loaded)", rep.WeightsBytes, uint64(loaded))
	eq(t, "stored_bytes", rep.StoredBytes, uint64(loaded+mtp))
	eq(t, "extra_layers", rep.ExtraLayers, 1)
	eq(t, "extra_layer_bytes", rep.ExtraLayerBytes, uint64(mtp))
	latent := (d.KVLora + d.Rope) * 2 // one latent, BF16, not ×2 for K and V
	eq(t, "kv_layers", rep.KVLayers, d.Layers)
	eq(t, "kv_bytes_per_token", rep.KVBytesPerToken, uint64(d.Layers*latent))
	eq(t, "context", rep.Context, d.MaxPos)
	eq(t, "kv_bytes", rep.KVBytes, uint64(d.Layers*latent*d.MaxPos))
	hasNote(t, rep, "1 layer(s) past num_hidden_layers 2", "--mtp")
	hasNote(t, rep, "kv_lora_rank + qk_rope_head_dim = 64 + 16 = 80")

	rep = estimate(t, r, Options{TP: 2})
	replicated := 2*d.Hidden + d.Layers*(norms+qa+kva) + router // model.norm, per-layer norms and MLA down-projections, the router
	eq(t, "per_gpu_weight_bytes tp2", rep.PerGPUWeightBytes, uint64(replicated+(loaded-replicated)/2))
	eq(t, "per_gpu_kv_bytes tp2 (latent on every GPU)", rep.PerGPUKVBytes, uint64(d.Layers*latent*d.MaxPos))
	eq(t, "bytes_by_split experts", rep.BytesBySplit["experts"], uint64(experts))

	rep = estimate(t, r, Options{MTP: true, TP: 2, Context: 512})
	eq(t, "weights_bytes --mtp", rep.WeightsBytes, uint64(loaded+mtp))
	eq(t, "kv_layers --mtp", rep.KVLayers, d.Layers+1)
	eq(t, "kv_bytes_per_token --mtp", rep.KVBytesPerToken, uint64((d.Layers+1)*latent))
	eq(t, "kv_bytes --mtp", rep.KVBytes, uint64((d.Layers+1)*latent*512))
	// The MTP layer: its MLA down-projections, norms (enorm, hnorm,
	// shared_head.norm), eh_proj and router copied; the rest divided.
	mtpReplicated := norms + qa + kva + router + 3*2*d.Hidden + m(d.Hidden, 2*d.Hidden)
	eq(t, "per_gpu_weight_bytes --mtp tp2", rep.PerGPUWeightBytes,
		uint64(replicated+mtpReplicated+(loaded-replicated)/2+(mtp-mtpReplicated)/2))
}

// TestSlidingWindow: gpt-oss-shaped, layer_types alternating sliding (window
// 128) and full attention; max_position_embeddings 131072 caps the default
// context at 32768.
func TestSlidingWindow(t *testing.T) {
	d := synth.FitSlidingDims
	r := load(t, synth.FitGPTOSSSliding())
	bf := func(n ...int) int { // BF16 elements
		p := 2
		for _, x := range n {
			p *= x
		}
		return p
	}
	// MXFP4: ½ byte an element in _blocks, one E8M0 byte a 32-block in _scales.
	mx := func(e, out, in int) int { return e*out*in/2 + e*out*in/32 }
	attn := bf(d.Heads*d.HeadDim, d.Hidden) + bf(d.Heads*d.HeadDim) + // q + bias
		2*(bf(d.KVHeads*d.HeadDim, d.Hidden)+bf(d.KVHeads*d.HeadDim)) + // k, v + biases
		bf(d.Hidden, d.Heads*d.HeadDim) + bf(d.Hidden) // o + bias
	sinks, norms := bf(d.Heads), 2*bf(d.Hidden)
	router := bf(d.Experts, d.Hidden) + bf(d.Experts)
	experts := mx(d.Experts, 2*d.Inter, d.Hidden) + bf(d.Experts, 2*d.Inter) + mx(d.Experts, d.Hidden, d.Inter) + bf(d.Experts, d.Hidden)
	layer := norms + attn + sinks + router + experts
	total := 2*bf(d.Vocab, d.Hidden) + bf(d.Hidden) + d.Layers*layer

	rep := estimate(t, r, Options{})
	eq(t, "weights_bytes", rep.WeightsBytes, uint64(total))
	eq(t, "context capped", rep.Context, DefaultContextCap)
	eq(t, "sliding_layers", rep.SlidingLayers, d.Layers/2)
	eq(t, "window", rep.Window, d.Window)
	perLayer := 2 * d.KVHeads * d.HeadDim * 2
	eq(t, "kv_bytes_per_token", rep.KVBytesPerToken, uint64(d.Layers*perLayer))
	full, sliding := d.Layers/2, d.Layers/2
	eq(t, "kv_bytes at 32768", rep.KVBytes, uint64(full*perLayer*32768+sliding*perLayer*d.Window))
	hasNote(t, rep, "2 of 4 decoder layers attend over a sliding window of 128 tokens")
	hasNote(t, rep, "max_position_embeddings 131072 capped at 32768")

	rep = estimate(t, r, Options{Context: 100, Batch: 2}) // within the window: every layer grows
	eq(t, "kv_bytes at 100", rep.KVBytes, uint64(d.Layers*perLayer*100*2))

	rep = estimate(t, r, Options{TP: 2})
	replicated := bf(d.Hidden) + d.Layers*(norms+sinks+router)
	eq(t, "per_gpu_weight_bytes tp2", rep.PerGPUWeightBytes, uint64(replicated+(total-replicated)/2))
	eq(t, "bytes_by_split experts", rep.BytesBySplit["experts"], uint64(d.Layers*experts))

	// 10 MB, no reserve: once past the window only the full layers grow.
	rep = estimate(t, r, Options{Reserve: "0", GPUs: []GPU{{"small", 10_000_000}, {"H200", 141 * GB}}})
	avail := 10_000_000 - total
	eq(t, "max_context 10 MB", rep.GPUs[0].MaxContext, (avail-sliding*perLayer*d.Window)/(full*perLayer))
	eq(t, "max_context H200 (the model's limit)", rep.GPUs[1].MaxContext, d.MaxPos)
	eq(t, "H200 count", rep.GPUs[1].Count, 1)

	// a reserve as large as a GPU leaves it nothing: said, not silent
	rep = estimate(t, r, Options{Reserve: "100GB", GPUs: []GPU{{"L40S", 48 * GB}, {"H200", 141 * GB}}})
	hasNote(t, rep, "the --reserve of 100.00 GB is all the memory of L40S (48.00 GB): nothing is left there for the model")
	eq(t, "L40S fits with the reserve", rep.GPUs[0].Fits, false)
}

// TestFP8KV: hf_quant_config.json's kv_cache_quant_algo FP8 makes the cache
// 1 byte an element; FP8 per-tensor scales make modules of odd sizes, so TP
// rounds each module up.
func TestFP8KV(t *testing.T) {
	d := synth.FitFP8KVDims
	r := load(t, synth.FitFP8KV())
	hd := d.Hidden / d.Heads                               // derived: no head_dim in config.json
	fp8 := func(out, in int) int { return out*in + 4 + 4 } // weight, weight_scale and input_scale F32 []
	q := fp8(d.Heads*hd, d.Hidden)                         // and o
	k := fp8(d.KVHeads*hd, d.Hidden) + 4                   // and v, with k_scale / v_scale
	mlp := fp8(d.Inter, d.Hidden)                          // gate, up; down is [hidden, inter], same size
	norms := 2 * 2 * d.Hidden
	embed := 2 * d.Vocab * d.Hidden
	total := 2*embed + 2*d.Hidden + d.Layers*(norms+2*q+2*k+3*mlp)

	rep := estimate(t, r, Options{})
	eq(t, "weights_bytes", rep.WeightsBytes, uint64(total))
	eq(t, "kv_dtype", rep.KVDType, "fp8")
	perLayer := 2 * d.KVHeads * hd * 1
	eq(t, "kv_bytes_per_token", rep.KVBytesPerToken, uint64(d.Layers*perLayer))
	eq(t, "kv_bytes", rep.KVBytes, uint64(d.Layers*perLayer*d.MaxPos))
	hasNote(t, rep, "fp8", "hf_quant_config.json kv_cache_quant_algo FP8")

	rep = estimate(t, r, Options{KVDType: "bf16"})
	eq(t, "kv_bytes --kv-dtype bf16", rep.KVBytes, uint64(2*d.Layers*perLayer*d.MaxPos))

	ceil := func(a, b int) int { return (a + b - 1) / b }
	rep = estimate(t, r, Options{TP: 8})
	perGPU := 2*d.Hidden + 2*embed/8 + d.Layers*(norms+2*ceil(q, 8)+2*ceil(k, d.KVHeads)+3*ceil(mlp, 8))
	eq(t, "per_gpu_weight_bytes tp8", rep.PerGPUWeightBytes, uint64(perGPU))
	eq(t, "per_gpu_kv_bytes tp8 (1 of 4 KV heads a GPU)", rep.PerGPUKVBytes, uint64(d.Layers*2*hd*d.MaxPos))

	rep = estimate(t, r, Options{TP: 16, GPUs: []GPU{{"big", 141 * GB}}})
	perGPU = 2*d.Hidden + 2*embed/16 + d.Layers*(norms+2*ceil(q, 16)+2*ceil(k, d.KVHeads)+3*ceil(mlp, 16))
	eq(t, "per_gpu_weight_bytes tp16 (rounded up a module)", rep.PerGPUWeightBytes, uint64(perGPU))
	eq(t, "tp16 fits (8 heads)", rep.GPUs[0].Fits, false)
	eq(t, "tp16 max_context", rep.GPUs[0].MaxContext, 0)
	eq(t, "count", rep.GPUs[0].Count, 1)
	hasNote(t, rep, "tp 16: does not divide the 8 attention heads and 4 KV heads")
	eq(t, "tp_refused tp16", rep.TPRefused, "it does not divide the 8 attention heads and 4 KV heads, which vLLM refuses")
	eq(t, "tp_refused tp1", estimate(t, r, Options{}).TPRefused, "")

	// A context past max_position_embeddings fits nowhere, however large
	// the GPU: vLLM refuses it as max_model_len. Max context still says how
	// far the memory goes, up to the limit.
	rep = estimate(t, r, Options{Context: d.MaxPos + 1, GPUs: []GPU{{"big", 141 * GB}}})
	eq(t, "context past the limit fits", rep.GPUs[0].Fits, false)
	eq(t, "context_refused", rep.ContextRefused, fmt.Sprintf("it is past max_position_embeddings %d, which vLLM refuses as max_model_len", d.MaxPos))
	eq(t, "max_context past the limit", rep.GPUs[0].MaxContext, d.MaxPos)
	eq(t, "count past the limit", rep.GPUs[0].Count, 0)
	eq(t, "context_refused at the limit", estimate(t, r, Options{Context: d.MaxPos}).ContextRefused, "")
}

// TestW4A: GPT-QModel's staged operands of GPTQ INT4 weights, only when asked,
// and only of the modules W4A can run (as the forward checks them).
func TestW4A(t *testing.T) {
	spec := synth.SmallLlama()                                          // hidden 256, inter 768, 2 layers, 4 heads, 2 KV heads; lm_head BF16
	sym, err := synth.LlamaRepo(spec, synth.LlamaWeights(spec), "gptq") // symmetric INT4, group 128
	if err != nil {
		t.Fatal(err)
	}
	r := load(t, sym)
	const hidden, inter, layers = 256, 768, 2
	hd := hidden / 4
	params := layers * (hidden*4*hd + 2*hidden*2*hd + 4*hd*hidden + 3*hidden*inter) // q, k, v, o, gate, up, down

	rep := estimate(t, r, Options{})
	eq(t, "staged without --w4a", rep.StagedBytes, 0)
	rep = estimate(t, r, Options{W4A: "fp8", TP: 2})
	eq(t, "staged fp8", rep.StagedBytes, uint64(params))
	eq(t, "per-GPU staged fp8 tp2", rep.PerGPUStagedBytes, uint64(params/2))
	hasNote(t, rep, "W4A-FP8", "1 byte a weight parameter")
	rep = estimate(t, r, Options{W4A: "nvfp4"})
	eq(t, "staged nvfp4", rep.StagedBytes, uint64(params+params+params/8)) // 2 E2M1 planes, their block-16 E4M3 scales, the E4M3 copy
	eq(t, "need includes staged", rep.GPUs[0].NeedBytes, rep.WeightsBytes+rep.StagedBytes+rep.KVBytes)

	if _, err := Estimate(load(t, synth.FitLlamaGQA()), Options{W4A: "fp8"}); err == nil || !strings.Contains(err.Error(), "no module W4A can run") {
		t.Errorf("--w4a on a BF16 repo: %v", err)
	}
	// one module W4A cannot run (a dynamic rule's desc_act): counted without
	// staged copies, and said
	cfg := string(sym.Files["config.json"])
	sym.Files["config.json"] = []byte(strings.Replace(cfg, `"quantization_config": {`, `"quantization_config": {"dynamic":{"+:model\\.layers\\.0\\.mlp\\.down_proj":{"desc_act":true}},`, 1))
	if string(sym.Files["config.json"]) == cfg {
		t.Fatal("config.json not patched")
	}
	rep = estimate(t, load(t, sym), Options{W4A: "fp8"})
	eq(t, "staged fp8 without layer 0's down_proj", rep.StagedBytes, uint64(params-hidden*inter))
	hasNote(t, rep, "W4A: 1 GPTQ module(s) it cannot run", "model.layers.0.mlp.down_proj: desc_act true")
	// sym false: the forward refuses W4A, so nothing is staged either
	if _, err := Estimate(load(t, synth.GPTQInt4()), Options{W4A: "fp8"}); err == nil || !strings.Contains(err.Error(), "no module W4A can run") {
		t.Errorf("--w4a on an asymmetric GPTQ repo: %v", err)
	}
	// the dynamic demo: its INT4 modules are asymmetric too, its down_proj INT8
	if _, err := Estimate(load(t, synth.GPTQDynamic()), Options{W4A: "nvfp4"}); err == nil || !strings.Contains(err.Error(), "no module W4A can run") {
		t.Errorf("--w4a on the dynamic demo: %v", err)
	}
}

// One shard of a sharded repo is no repo to fit: its other shards' weights
// are not read. Refused by rule, not estimated from the one shard. The lone
// model.safetensors of an unsharded repo is the whole repo, and fits as its
// folder does.
func TestFitRefusesOneFile(t *testing.T) {
	if _, err := Estimate(loadFile(t, synth.DeepSeekMiniFP8(), "model-00001-of-00002.safetensors"), Options{}); err == nil || !strings.Contains(err.Error(), "rule fit-whole-repo") {
		t.Errorf("fit of one shard: %v", err)
	}
	one, err := Estimate(loadFile(t, synth.GPTQInt4(), "model.safetensors"), Options{})
	if err != nil {
		t.Fatalf("fit of an unsharded repo's model.safetensors: %v", err)
	}
	if whole := estimate(t, load(t, synth.GPTQInt4()), Options{}); one.WeightsBytes != whole.WeightsBytes || one.KVBytes != whole.KVBytes {
		t.Errorf("the lone file: %d + %d bytes; its folder %d + %d", one.WeightsBytes, one.KVBytes, whole.WeightsBytes, whole.KVBytes)
	}
}
