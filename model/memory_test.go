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

// heapLive is the heap the last collection found live: the working set,
// without the garbage that piles up while a loaded machine starves the
// collector (the objects' bytes, sampled instead, once read 7.32 MiB
// against a 7.45 MiB bound under CI's parallel packages, 3.5-4.5 MiB
// when quiet).
func heapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestStreamedPeakHeap runs a 6-layer model whose float32 weights are about
// 2.5× MemoryBound and holds the live heap a forward adds under
// MemoryBound. The collector runs at GOGC=5 for the test, so it marks after
// every few hundred KB allocated and the live heap it reports follows the
// working set closely; that is sampled every 100 µs.
func TestStreamedPeakHeap(t *testing.T) {
	// The instrument first: a run that holds 12 MiB in 1 MiB pieces, taken
	// one at a time as a layer's weights are, reports most of it (the live
	// heap is what the last finished collection marked: it lags the
	// allocations by one piece when quiet, by two or three when the CPU is
	// shared). A metric that did not follow the working set would read
	// next to nothing here.
	held, err := peakHeap(func() error {
		var keep [][]byte
		for range 12 {
			keep = append(keep, make([]byte, 1<<20))
			time.Sleep(2 * time.Millisecond)
		}
		sink = keep
		return nil
	})
	sink = nil
	if err != nil || held < 9<<20 {
		t.Fatalf("peakHeap reported %d bytes for a run holding 12 MiB", held)
	}
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

// peakHeap runs fn at GOGC=5 and returns the most live heap it added,
// sampled every 100 µs.
func peakHeap(fn func() error) (int64, error) {
	old := debug.SetGCPercent(5)
	defer debug.SetGCPercent(old)
	runtime.GC()
	base := heapLive()
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			if h := heapLive(); h > peak.Load() {
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

var sink [][]byte
