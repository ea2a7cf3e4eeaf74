package model

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantscope/quantscope/synth"
)

// heapObjects is the heap occupied by objects, live or not yet swept.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestStreamedPeakHeap runs a 6-layer model whose float32 weights are about
// 2.5× MemoryBound and holds the heap a forward adds under MemoryBound. The
// collector runs at GOGC=5 for the test so garbage cannot hide behind the
// pacer; the heap is sampled every 100 µs.
func TestStreamedPeakHeap(t *testing.T) {
	s := synth.SmallLlama()
	s.Layers, s.Inter = 6, 1024
	w := synth.LlamaWeights(s)
	var whole int64
	for _, m := range w {
		whole += 4 * int64(len(m.Data))
	}
	tokens := make([]int, 32)
	for i := range tokens {
		tokens[i] = (i * 37) % s.Vocab
	}
	for _, c := range []struct{ storage, mode string }{{"f32", W4ANone}, {"gptq", W4ANone}, {"gptq", W4AFP8}, {"gptq", W4ANVFP4}} {
		m := load(t, s, w, c.storage)
		bound := m.MemoryBound(len(tokens))
		if bound*2 > whole {
			t.Fatalf("bound %d is not well below the model's float32 weights %d: the test would not tell streaming apart", bound, whole)
		}
		used, err := peakHeap(func() error {
			_, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s --w4a %s: peak heap +%.2f MiB, bound %.2f MiB, whole model as float32 %.2f MiB", c.storage, c.mode, float64(used)/(1<<20), float64(bound)/(1<<20), float64(whole)/(1<<20))
		if used > bound {
			t.Fatalf("%s --w4a %s: the forward's peak heap +%d bytes passes its bound %d", c.storage, c.mode, used, bound)
		}
	}
}

// peakHeap runs fn at GOGC=5 and returns the most heap it added, sampled
// every 100 µs.
func peakHeap(fn func() error) (int64, error) {
	old := debug.SetGCPercent(5)
	defer debug.SetGCPercent(old)
	runtime.GC()
	base := heapObjects()
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			if h := heapObjects(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	err := fn()
	close(stop)
	wg.Wait()
	return peak.Load() - base, err
}
