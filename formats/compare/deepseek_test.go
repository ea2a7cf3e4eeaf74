package compare

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// The acceptance of seed 004's ledger: deepseek-ai/DeepSeek-R1 (163 shards,
// FP8 128×128 blocks) against nvidia/DeepSeek-R1-FP4 (80 shards, ModelOpt
// NVFP4 with attention, routers and the MTP layer excluded), at their real
// shapes (headers real, data sparse). The article measured, from the real
// headers: 688,574,839,360 and 423,605,060,024 bytes, 684,489,845,504
// parameters on both sides, 180,364 tensors and 44,727 quantized linears in
// the FP4 release, whose E4M3 scales are 41,103,261,696 bytes against
// 328,826,093,568 of packed weights; routed experts 654.07 GB → 367.82 GB,
// attention 11.42 → 22.83 GB, the MTP layer 15.42 → 26.93 GB, 8.05 → 4.95
// bits per weight, 4.73 without the MTP layer.
func TestDiffDeepSeekR1Ledger(t *testing.T) {
	dir := t.TempDir()
	d := synth.DeepSeekV3
	fp8Dir, fp4Dir := filepath.Join(dir, "DeepSeek-R1"), filepath.Join(dir, "DeepSeek-R1-FP4")
	if err := d.WriteDeepSeekSparse(fp8Dir, 163, false); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteDeepSeekSparse(fp4Dir, 80, true); err != nil {
		t.Fatal(err)
	}
	a, b := loadDir(t, fp8Dir), loadDir(t, fp4Dir)
	inv := b.InventoryWithoutTensors()
	s := inv.Summary
	if s.Tensors != 180364 || s.QuantizedModules != 44727 || s.BytesByDType["F8_E4M3"] != 41103261696 || s.BytesByDType["U8"] != 328826093568 {
		t.Errorf("FP4 release: %d tensors, %d quantized modules, E4M3 %d, U8 %d bytes; the article counted 180364, 44727, 41103261696, 328826093568",
			s.Tensors, s.QuantizedModules, s.BytesByDType["F8_E4M3"], s.BytesByDType["U8"])
	}
	got := New(FromCheckpoint(a), FromCheckpoint(b))
	if got.A.Bytes != 688574839360 || got.B.Bytes != 423605060024 || got.A.Parameters != 684489845504 || got.B.Parameters != 684489845504 {
		t.Errorf("totals: A %d bytes %d parameters, B %d bytes %d parameters", got.A.Bytes, got.A.Parameters, got.B.Bytes, got.B.Parameters)
	}
	gb := func(n uint64) string { return fmt.Sprintf("%.2f", float64(n)/1e9) }
	ledger := map[string][2]string{"routed_experts": {"654.07", "367.82"}, "attention": {"11.42", "22.83"}, "extra_layers": {"15.42", "26.93"}}
	for _, k := range got.Kinds {
		if w, ok := ledger[k.Kind]; ok {
			if gb(k.ABytes) != w[0] || gb(k.BBytes) != w[1] {
				t.Errorf("%s: %s GB → %s GB, the article measured %s → %s", k.Kind, gb(k.ABytes), gb(k.BBytes), w[0], w[1])
			}
			delete(ledger, k.Kind)
		}
	}
	if len(ledger) != 0 {
		t.Errorf("kinds missing: %v", ledger)
	}
	for _, c := range []struct {
		what, got, want string
	}{
		{"A total", fmt.Sprintf("%.1f GB at %.2f bits", float64(got.A.Bytes)/1e9, got.A.BitsPerWeight), "688.6 GB at 8.05 bits"},
		{"B total", fmt.Sprintf("%.1f GB at %.2f bits", float64(got.B.Bytes)/1e9, got.B.BitsPerWeight), "423.6 GB at 4.95 bits"},
		{"B without MTP", fmt.Sprintf("%.2f bits", got.B.BitsPerWeightWithoutExtra), "4.73 bits"},
		{"ratio", fmt.Sprintf("%.2fx", float64(got.A.Bytes)/float64(got.B.Bytes)), "1.63x"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, the article says %s", c.what, c.got, c.want)
		}
	}
	t.Logf("A %+v", got.A)
	t.Logf("B %+v", got.B)
	for _, c := range got.Changed {
		t.Logf("changed %s: %s → %s (%d)", c.Module, c.AFormat, c.BFormat, c.Count)
	}
}
