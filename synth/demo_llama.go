package synth

// DemoLlamas are the small generated Llamas the demo hub serves for the
// forward and eval jobs: SmallLlama's weights stored in BF16 and as GPTQ
// INT4 (W4A-ready), each with a Llama-3-style tokenizer.json.
func DemoLlamas() ([]*Repo, error) {
	s := SmallLlama()
	w := LlamaWeights(s)
	var out []*Repo
	for _, st := range []struct{ storage, suffix string }{{"bf16", ""}, {"gptq", "-GPTQ"}} {
		spec := s
		spec.ID = s.ID + st.suffix
		r, err := LlamaRepo(spec, w, st.storage)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
