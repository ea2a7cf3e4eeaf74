package synth

// Llama1BShape is Llama 3.2 1B's shape: hidden 2048, 16 decoder layers, 32
// heads over 8 KV heads (head_dim 64), MLP 8192, vocabulary 128256, tied
// embeddings, llama3 RoPE. WriteLlamaSparse writes it without its weights'
// bytes on disk, for the decoder's speed and memory benchmarks.
func Llama1BShape() LlamaSpec {
	return LlamaSpec{ID: Org + "/Llama-1B-shape", Layers: 16, Hidden: 2048, Inter: 8192, Heads: 32, KVHeads: 8, Vocab: 128256,
		Tied: true, Llama3Scaling: true, MaxPosition: 131072}
}
