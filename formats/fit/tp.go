package fit

// Tensor parallelism: how each module's bytes divide over N GPUs as vLLM
// splits it, which N the attention heads allow, and the notes that say so.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
)

// divide is one module's bytes on the largest GPU of a TP-n group.
func (e *estimator) divide(m placed, b uint64, n int) uint64 {
	N := uint64(n)
	if m.split == anatomy.SplitReplicated || n == 1 {
		return b
	}
	if e.kv.attention != "mla" && e.kv.kvHeads > 0 {
		K := uint64(e.kv.kvHeads)
		switch m.slot {
		case anatomy.SlotK, anatomy.SlotV:
			// Fewer KV heads than GPUs: each GPU holds one head's projection.
			return ceilDiv(b, min(N, K))
		case anatomy.SlotQKV:
			if q, kv := e.qkvFrac[0], e.qkvFrac[1]; q > 0 && K < N {
				qb := b * q / (q + kv)
				return ceilDiv(qb, N) + ceilDiv(b-qb, K)
			}
		}
	}
	return ceilDiv(b, N)
}

func (e *estimator) weightsPerGPU(n int) uint64 {
	if t, ok := e.wcache[n]; ok {
		return t
	}
	var t uint64
	for _, m := range e.mods {
		if e.loaded(m) {
			t += m.n * e.divide(m, m.bytes, n)
		}
	}
	e.wcache[n] = t
	return t
}

func (e *estimator) stagedPerGPU(n int) uint64 {
	if e.staged == nil {
		return 0
	}
	var t uint64
	for _, m := range e.mods {
		if m.w4a && e.loaded(m) {
			t += m.n * e.divide(m, e.staged(m.params), n)
		}
	}
	return t
}

// divisible says whether vLLM accepts TP n for this model's heads.
func (e *estimator) divisible(n int) bool {
	if e.heads > 0 && e.heads%n != 0 {
		return false
	}
	if k := e.kv.kvHeads; k > 0 && k%n != 0 && n%k != 0 {
		return false
	}
	return true
}

func tpNotes(e *estimator, n int) []string {
	var out []string
	if n > 1 {
		out = append(out, fmt.Sprintf("tp %d: column- and row-parallel linears, vocab-parallel embeddings and head, and routed experts divided by %d, each module rounded up to a whole byte; norms, routers, MLA down-projections and modules of unknown role copied on every GPU; a split module's scales and bias divided with its weight", n, n))
	}
	if e.kv.attention != "mla" && e.kv.kvHeads > 0 && n > 1 {
		if e.kv.kvHeads >= n {
			out = append(out, fmt.Sprintf("tp %d: the %d KV heads divided, %d a GPU, and the KV cache with them", n, e.kv.kvHeads, (e.kv.kvHeads+n-1)/n))
		} else {
			out = append(out, fmt.Sprintf("tp %d: fewer KV heads (%d) than GPUs, so each GPU holds one KV head, its k/v projection and its cache (each head replicated on %d GPUs, as vLLM does)", n, e.kv.kvHeads, n/e.kv.kvHeads))
		}
	}
	var bad []string
	for _, c := range slices.Concat([]int{n}, Counts) {
		if c > 1 && !e.divisible(c) && !slices.Contains(bad, fmt.Sprint(c)) {
			bad = append(bad, fmt.Sprint(c))
		}
	}
	if len(bad) > 0 {
		out = append(out, fmt.Sprintf("tp %s: does not divide %s, which vLLM refuses, so it never fits and a count never uses it", strings.Join(bad, ", "), e.headsText()))
	}
	return out
}

// headsText names the head counts a TP degree must divide.
func (e *estimator) headsText() string {
	heads := fmt.Sprintf("the %d attention heads", e.heads)
	if k := e.kv.kvHeads; k > 0 && k != e.heads {
		heads += fmt.Sprintf(" and %d KV heads", k)
	}
	return heads
}
