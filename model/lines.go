package model

import (
	"context"
	"fmt"
	"math"
)

// PerplexityLines is Perplexity with each sequence's own score too (Tokens
// 0 and NLL NaN for a sequence of one token). The total is summed in the
// same order as Perplexity's, so the two agree bit for bit. opt.Progress is
// told after every layer of every sequence: done out of
// len(seqs)·(Layers+2).
func (m *Model) PerplexityLines(ctx context.Context, seqs [][]int, opt Options) (Perplexity, []Perplexity, error) {
	var nll float64
	var n int
	progress := opt.Progress
	per := int64(m.Config.Layers + 2)
	lines := make([]Perplexity, len(seqs))
	for i, seq := range seqs {
		o := opt
		if progress != nil {
			base := int64(i) * per
			o.Progress = func(done, _ int64) { progress(base+done, per*int64(len(seqs))) }
		}
		logits, err := m.Forward(ctx, seq, o)
		if err != nil {
			return Perplexity{}, nil, &SequenceError{Index: i, Err: err}
		}
		V := logits.Cols
		var own float64
		for t := 0; t+1 < len(seq); t++ {
			row := logits.Data[t*V : (t+1)*V]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			var sum float64
			for _, v := range row {
				sum += math.Exp(float64(v) - mx)
			}
			term := mx + math.Log(sum) - float64(row[seq[t+1]])
			nll += term
			own += term
			n++
		}
		lines[i] = Perplexity{Tokens: len(seq) - 1, NLL: math.NaN(), Perplexity: math.NaN()}
		if len(seq) > 1 {
			lines[i].NLL = own / float64(len(seq)-1)
			lines[i].Perplexity = math.Exp(lines[i].NLL)
		}
	}
	if n == 0 {
		return Perplexity{}, nil, fmt.Errorf("no sequence of two or more tokens: nothing to predict")
	}
	mean := nll / float64(n)
	if math.IsNaN(mean) || math.IsInf(mean, 0) {
		return Perplexity{}, nil, fmt.Errorf("the mean negative log-likelihood is %v (non-finite logits)", mean)
	}
	return Perplexity{Tokens: n, NLL: mean, Perplexity: math.Exp(mean)}, lines, nil
}
