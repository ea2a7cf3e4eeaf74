package checkpoint

import (
	"fmt"
	"slices"

	"github.com/quantscope/quantscope/formats/anatomy"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// ForwardInfo says, from the configs, the file list and the modules alone,
// what the companion's forward (package model) can run on the repo, so that
// a view offers only the jobs that can succeed and says why not otherwise.
// The jobs check again, and their errors are the last word.
type ForwardInfo struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`
	// Llama: the forward runs Llama decoders (anatomy.IsLlama).
	Llama bool `json:"llama"`
	// W4ARefused says why GPT-QModel's W4A cannot run on the decoder's
	// projections (the first one that fails scheme.W4AReady); empty when
	// it can.
	W4ARefused string `json:"w4a_refused,omitempty"`
	// Tokenizer: the repo has a tokenizer.json, so text can be given.
	Tokenizer bool `json:"tokenizer"`
}

// Forward is what the companion's forward can run on the checkpoint.
func (c *Checkpoint) Forward() ForwardInfo {
	var f ForwardInfo
	m, err := anatomy.ParseModel(c.Config)
	if err == nil {
		f.ModelType, f.Architectures = m.ModelType, m.Architectures
		f.Llama = anatomy.IsLlama(m.ModelType, m.Architectures)
	}
	if f.Architectures == nil {
		f.Architectures = []string{}
	}
	f.Tokenizer = slices.ContainsFunc(c.Files, func(file hub.File) bool { return file.Path == "tokenizer.json" })
	layers := 0
	if m != nil {
		layers = m.NumHiddenLayers
	}
	f.W4ARefused = c.w4aRefused(layers)
	return f
}

// w4aRefused is the forward's W4A check (model.checkW4A) over layers
// decoder layers: every projection a GPTQ INT4 module W4A takes.
func (c *Checkpoint) w4aRefused(layers int) string {
	if layers <= 0 {
		return "config.json gives no num_hidden_layers"
	}
	for l := range layers {
		for _, p := range anatomy.LlamaProjections {
			name := fmt.Sprintf("model.layers.%d.%s", l, p)
			mod, ok := c.moduleNamed(name) // a module's name: no tensor is named so
			if !ok {
				return name + ": no such module"
			}
			if rule, why := scheme.W4AReady(mod, c.Scheme); rule != "" {
				return name + ": " + why
			}
		}
	}
	return ""
}
