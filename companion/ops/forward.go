package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/tokenizer"
)

// The "forward" op: the Llama logits of one sequence, summarised (the top-k
// next tokens of each position), as `quantscope forward` computes them.
// Parameters (ForwardParams): tokens or text, w4a, top_k, logits. The full
// logits come back only when asked, as the array "logits" [T, V] (f32).
// Progress counts layers: the embedding, each decoder layer and the head.
func init() {
	Register("forward", forwardOp)
	Register("eval", evalOp)
}

// ForwardParams are the "forward" op's parameters.
type ForwardParams struct {
	Tokens []int  `json:"tokens"` // token ids, or
	Text   string `json:"text"`   // text, tokenized with the repo's tokenizer.json
	W4A    string `json:"w4a"`    // none (default) | fp8 | what the model supports
	TopK   int    `json:"top_k"`  // next-token candidates per position: default 5, at most 100
	Logits bool   `json:"logits"` // also send the full logits as the array "logits"
	// The W4A-NVFP4 stream, as forward/eval's --attention, --recipe and
	// --scales: "fp8" attention is the mixed policy; scales are calibrated
	// global scales by producer (a producer_maximum report's global_scales).
	Attention string             `json:"attention"`
	Recipe    string             `json:"recipe"`
	Scales    map[string]float32 `json:"scales"`
}

// maxLogitsArray bounds the full logits a forward job sends back: with the
// copy its binary frame makes, the job holds three times this (the model's
// own bound on a forward's logits is 4 GiB, for the command line's --out).
const maxLogitsArray = 256 << 20

// TopToken is one next-token candidate of a position.
type TopToken struct {
	ID    int     `json:"id"`
	Logit float32 `json:"logit"`
	Text  string  `json:"text,omitempty"` // its decoded text, when the repo has a tokenizer
}

// ForwardResult is the "forward" op's JSON.
type ForwardResult struct {
	Shape  [2]int       `json:"shape"` // [T, V]
	Tokens []int        `json:"tokens"`
	W4A    string       `json:"w4a"`
	Top    [][]TopToken `json:"top"` // per position, best first
}

func forwardOp(ctx context.Context, env Env, module string, raw json.RawMessage) (*Result, error) {
	var p ForwardParams
	if err := DecodeParams("forward", raw, &p); err != nil {
		return nil, err
	}
	if (len(p.Tokens) == 0) == (p.Text == "") {
		return nil, fmt.Errorf("forward: parameters: give tokens or text, one of them")
	}
	if p.TopK == 0 {
		p.TopK = 5
	}
	if p.TopK < 1 || p.TopK > 100 {
		return nil, fmt.Errorf("forward: parameters: top_k %d: want 1..100", p.TopK)
	}
	m, err := model.New(env.Checkpoint, env.Backend)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env.Checkpoint.Source.Name(), err)
	}
	tok, tokErr := tokenizer.Load(ctx, env.Checkpoint.Source) // shows the top tokens; text needs it
	if p.Text != "" {
		if errors.Is(tokErr, tokenizer.ErrNoTokenizer) {
			return nil, fmt.Errorf("forward: %w: give token ids (tokens) instead of text", tokErr)
		}
		if tokErr != nil {
			return nil, tokErr
		}
		if p.Tokens, err = tok.Encode(p.Text, true); err != nil {
			return nil, err
		}
	}
	if need := int64(len(p.Tokens)) * int64(m.Config.Vocab) * 4; p.Logits && need > maxLogitsArray {
		return nil, fmt.Errorf("forward: rule logits-size: %d tokens × %d logits are %d MiB, over the %d MiB a job sends back (the op holds them and their frame copies them); ask for top_k alone, send fewer tokens, or run `quantscope forward --out FILE` on the command line",
			len(p.Tokens), m.Config.Vocab, need>>20, maxLogitsArray>>20)
	}
	mode := p.W4A
	if mode == "" {
		mode = model.W4ANone
	}
	opt := streamOptions(mode, p.Attention, p.Recipe, p.Scales, env.Progress)
	if err := m.CheckScales(opt); err != nil {
		return nil, err
	}
	logits, err := m.Forward(ctx, p.Tokens, opt)
	if err != nil {
		return nil, err
	}
	res := ForwardResult{Shape: [2]int{logits.Rows, logits.Cols}, Tokens: p.Tokens, W4A: mode}
	for t := range logits.Rows {
		res.Top = append(res.Top, topK(logits.Data[t*logits.Cols:(t+1)*logits.Cols], p.TopK, tok))
	}
	out := &Result{JSON: res}
	if p.Logits {
		out.Arrays = []Array{{Name: "logits", Shape: []int{logits.Rows, logits.Cols}, F32: logits.Data}}
	}
	return out, nil
}

// topK returns row's k largest logits, best first (ties: the lower id; NaN
// last, as -Inf). It keeps the k best seen so far in order, so a row costs
// one comparison an entry and an insertion only for the few that enter:
// O(V·k) at worst, about V in practice, where sorting each row of a 128k
// vocabulary took a second every 50 positions.
func topK(row []float32, k int, tok *tokenizer.Tokenizer) []TopToken {
	key := func(v float32) float32 {
		if v != v { // NaN
			return float32(math.Inf(-1))
		}
		return v
	}
	k = min(k, len(row))
	best := make([]int, 0, k) // ids, best first
	for i, v := range row {
		kv := key(v)
		if len(best) == k {
			// A later id never displaces an equal key: ties keep the lower id.
			if kv <= key(row[best[k-1]]) {
				continue
			}
			best = best[:k-1]
		}
		j := len(best)
		for j > 0 && kv > key(row[best[j-1]]) {
			j--
		}
		best = append(best, 0)
		copy(best[j+1:], best[j:])
		best[j] = i
	}
	out := make([]TopToken, 0, k)
	for _, i := range best {
		t := TopToken{ID: i, Logit: row[i]}
		if tok != nil {
			t.Text = tok.TokenString(i)
		}
		out = append(out, t)
	}
	return out
}
