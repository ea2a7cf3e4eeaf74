package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/internal/userfile"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/tokenizer"
)

// The "eval" op: perplexity over sequences, one forward each, as
// `quantscope eval` computes it; with compare, the dense forward and the
// w4a one side by side and their difference. The data is inline (lines of
// text or sequences of ids, bounded by the websocket's message limit) or a
// file on the companion's machine (text_file: text lines; data_file: id
// lines). Progress counts layers over every sequence and mode. The JSON is
// eval --json's; each mode's per-sequence mean NLL comes back as the array
// "nll.MODE" (f32 [sequences], NaN for a one-token sequence).

// EvalParams are the "eval" op's parameters; exactly one of lines,
// sequences, text_file, data_file.
type EvalParams struct {
	Lines     []string `json:"lines"`     // text, one sequence each, tokenized with the repo's tokenizer.json
	Sequences [][]int  `json:"sequences"` // token ids
	TextFile  string   `json:"text_file"` // a text file on the companion's machine, one sequence per non-empty line
	DataFile  string   `json:"data_file"` // a file of token ids, one sequence per line
	W4A       string   `json:"w4a"`       // none (default) | fp8 | what the model supports
	Compare   bool     `json:"compare"`   // the dense forward and the w4a one side by side
	// The W4A-NVFP4 stream, as forward/eval's --attention, --recipe and
	// --scales: "fp8" attention is the mixed policy; scales are calibrated
	// global scales by producer (a producer_maximum report's global_scales).
	Attention string             `json:"attention"`
	Recipe    string             `json:"recipe"`
	Scales    map[string]float32 `json:"scales"`
}

// maxEvalFile bounds a data file read on the companion's machine.
const maxEvalFile = 64 << 20

// W4ANote says where the CPU reference path's numbers differ from GPT-QModel's.
const W4ANote = "W4A on the CPU reference path runs with a float32 model dtype; GPT-QModel runs FP16/BF16 on CUDA"

// NonCausalNote is said of a W4A-NVFP4 run that is not causal
// (model.Causal): the command line prints it, a job's result carries it.
const NonCausalNote = "W4A-NVFP4 is not causal here: operands without a calibrated scale (always the norm outputs, which repack dynamically; o_proj/down_proj inputs without --scales) take their global scale from the amax of every token of the call, as GPT-QModel's uncalibrated stream does"

func evalOp(ctx context.Context, env Env, module string, raw json.RawMessage) (*Result, error) {
	var p EvalParams
	if err := DecodeParams("eval", raw, &p); err != nil {
		return nil, err
	}
	given := 0
	for _, g := range []bool{len(p.Lines) > 0, len(p.Sequences) > 0, p.TextFile != "", p.DataFile != ""} {
		if g {
			given++
		}
	}
	if given != 1 {
		return nil, fmt.Errorf("eval: parameters: give exactly one of lines, sequences, text_file, data_file")
	}
	mode := p.W4A
	if mode == "" {
		mode = model.W4ANone
	}
	if p.Compare && mode == model.W4ANone {
		return nil, fmt.Errorf("eval: parameters: compare needs w4a (the side to compare with the dense forward)")
	}
	m, err := model.New(env.Checkpoint, env.Backend)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env.Checkpoint.Source.Name(), err)
	}
	if err := m.CheckScales(streamOptions(mode, p.Attention, p.Recipe, p.Scales, nil)); err != nil {
		return nil, err
	}
	seqs, where, err := evalData(ctx, env, p)
	if err != nil {
		return nil, err
	}
	modes := []string{mode}
	if p.Compare {
		modes = []string{model.W4ANone, mode}
	}
	var res []model.Perplexity
	out := &Result{}
	for i, md := range modes {
		var prog func(done, total int64)
		if env.Progress != nil {
			prog = func(done, total int64) { env.Progress(int64(i)*total+done, int64(len(modes))*total) }
		}
		r, lines, err := m.PerplexityLines(ctx, seqs, streamOptions(md, p.Attention, p.Recipe, p.Scales, prog))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		res = append(res, r)
		nll := make([]float32, len(lines))
		for j, l := range lines {
			nll[j] = float32(l.NLL)
		}
		out.Arrays = append(out.Arrays, Array{Name: "nll." + md, Shape: []int{len(nll)}, F32: nll})
	}
	if !p.Compare {
		out.JSON = res[0]
		return out, nil
	}
	causal := ""
	if !model.Causal(streamOptions(mode, p.Attention, p.Recipe, p.Scales, nil)) {
		causal = NonCausalNote
	}
	out.JSON = map[string]any{
		"dense": res[0], "w4a": res[1], "w4a_mode": mode, "note": W4ANote, "recipe": p.Recipe, "causal_note": causal,
		"difference": map[string]float64{
			"nll":              res[1].NLL - res[0].NLL,
			"perplexity":       res[1].Perplexity - res[0].Perplexity,
			"perplexity_ratio": res[1].Perplexity / res[0].Perplexity,
		},
	}
	return out, nil
}

// evalData turns the parameters into token sequences and names where they came from.
func evalData(ctx context.Context, env Env, p EvalParams) ([][]int, string, error) {
	if len(p.Sequences) > 0 {
		return p.Sequences, "sequences", nil
	}
	where, text := "lines", p.Lines
	if p.TextFile != "" || p.DataFile != "" {
		where = p.TextFile + p.DataFile
		what := "text_file"
		if p.DataFile != "" {
			what = "data_file"
		}
		path, err := env.Reads.Path("eval", what, where)
		if err != nil {
			return nil, "", err
		}
		b, err := userfile.Read(path, maxEvalFile) // a regular file, read no further than the bound
		if err != nil {
			return nil, "", fmt.Errorf("eval: %w (an eval file is a regular file of at most %d MiB)", err, maxEvalFile>>20)
		}
		text = nil
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSuffix(l, "\r"); strings.TrimSpace(l) != "" {
				text = append(text, l)
			}
		}
		if p.DataFile != "" {
			var seqs [][]int
			for i, l := range text {
				ids, err := calib.ParseIDs(l)
				if err != nil {
					return nil, "", fmt.Errorf("%s: line %d: %w", where, i+1, err)
				}
				seqs = append(seqs, ids)
			}
			return seqs, where, nil
		}
	}
	tok, err := tokenizer.Load(ctx, env.Checkpoint.Source)
	if errors.Is(err, tokenizer.ErrNoTokenizer) {
		return nil, "", fmt.Errorf("eval: %w: give token id lines (data_file) instead of text", err)
	}
	if err != nil {
		return nil, "", err
	}
	seqs := make([][]int, len(text))
	for i, l := range text {
		if seqs[i], err = tok.Encode(l, true); err != nil {
			return nil, "", fmt.Errorf("%s: line %d: %w", where, i+1, err)
		}
	}
	if len(seqs) == 0 {
		return nil, "", fmt.Errorf("eval: %s: no text lines", where)
	}
	return seqs, where, nil
}

// streamOptions are the model options of one mode: the stream's policy,
// recipe and scales apply to the W4A side only.
func streamOptions(w4a, attention, recipe string, scales map[string]float32, progress func(done, total int64)) model.Options {
	if w4a == model.W4ANone {
		return model.Options{W4A: w4a, Progress: progress}
	}
	return model.Options{W4A: w4a, Attention: attention, Recipe: recipe, Scales: scales, Progress: progress}
}
