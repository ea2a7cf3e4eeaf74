package model

import (
	"context"
	"fmt"
	"math"
)

// Perplexity is eval's result: Tokens predicted, their mean negative
// log-likelihood NLL, and exp(NLL).
type Perplexity struct {
	Tokens     int     `json:"tokens"`
	NLL        float64 `json:"nll"`
	Perplexity float64 `json:"perplexity"`
}

// SequenceError is a sequence of an evaluation that failed.
type SequenceError struct {
	Index int // 0-based
	Err   error
}

func (e *SequenceError) Error() string { return fmt.Sprintf("sequence %d: %v", e.Index+1, e.Err) }
func (e *SequenceError) Unwrap() error { return e.Err }

// Perplexity runs one forward per sequence and scores each next token with
// a log-softmax in float64. opt.Progress is told after each sequence, out of
// len(seqs).
func (m *Model) Perplexity(ctx context.Context, seqs [][]int, opt Options) (Perplexity, error) {
	var nll float64
	var n int
	progress := opt.Progress
	opt.Progress = nil
	for i, seq := range seqs {
		logits, err := m.Forward(ctx, seq, opt)
		if err != nil {
			return Perplexity{}, &SequenceError{Index: i, Err: err}
		}
		V := logits.Cols
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
			nll += mx + math.Log(sum) - float64(row[seq[t+1]])
			n++
		}
		if progress != nil {
			progress(int64(i+1), int64(len(seqs)))
		}
	}
	if n == 0 {
		return Perplexity{}, fmt.Errorf("no sequence of two or more tokens: nothing to predict")
	}
	mean := nll / float64(n)
	if math.IsNaN(mean) || math.IsInf(mean, 0) {
		return Perplexity{}, fmt.Errorf("the mean negative log-likelihood is %v (non-finite logits)", mean)
	}
	return Perplexity{Tokens: n, NLL: mean, Perplexity: math.Exp(mean)}, nil
}
