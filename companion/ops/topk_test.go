package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// topK against the plainest reading of its rule: every id sorted by logit,
// best first, ties by the lower id, NaN as -Inf; the first k.
func TestTopKMatchesFullSort(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
	for trial := range 400 {
		n := 1 + r.IntN(300)
		row := make([]float32, n)
		for i := range row {
			switch x := r.IntN(10); {
			case x < 2:
				row[i] = special[r.IntN(len(special))]
			case x < 6:
				row[i] = float32(r.IntN(5)) // many ties
			default:
				row[i] = float32(r.NormFloat64())
			}
		}
		k := 1 + r.IntN(100)
		want := fullSortTop(row, k)
		var got []int
		for _, tt := range topK(row, k, nil) {
			got = append(got, tt.ID)
			if math.Float32bits(tt.Logit) != math.Float32bits(row[tt.ID]) {
				t.Fatalf("trial %d: id %d carries logit %v, the row holds %v", trial, tt.ID, tt.Logit, row[tt.ID])
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (n %d, k %d): ids %v, want %v\nrow %v", trial, n, k, got, want, row)
		}
	}
}

func fullSortTop(row []float32, k int) []int {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		if math.IsNaN(float64(row[i])) {
			return math.Inf(-1)
		}
		return float64(row[i])
	}
	sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) > key(idx[b]) })
	return idx[:min(k, len(idx))]
}

// One position of a 128k vocabulary, as forward summarises each;
// BenchmarkTopKFullSort is the plain full sort, the reference.
func BenchmarkTopK(b *testing.B) { benchTopK(b, func(row []float32) { topK(row, 5, nil) }) }

func BenchmarkTopKFullSort(b *testing.B) { benchTopK(b, func(row []float32) { fullSortTop(row, 5) }) }

func benchTopK(b *testing.B, top func([]float32)) {
	r := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, 128256)
	for i := range row {
		row[i] = float32(r.NormFloat64())
	}
	b.SetBytes(int64(4 * len(row)))
	for b.Loop() {
		top(row)
	}
}
