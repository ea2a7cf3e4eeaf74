package main

import (
	"context"
	"flag"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/quantscope/quantscope/formats/checkpoint"
)

// streamHeadroom is the garbage a streamed command lets pile up above what
// its loaded checkpoint keeps before the collector runs. The stream itself
// makes little: the band pipeline's working set is pooled (about 4 × cores
// × 512 KiB), and a module read over the network goes through a few
// reused 4 MiB read-ahead buffers (hub.WithReadAhead: three blocks in
// flight ahead of the readers, two kept behind) in the file cache. What
// garbage there is (each request's HTTP objects, text formatted for
// --json, the load's own leftovers) would by the runtime's default grow to
// as much again as the checkpoint holds, 110 MB for a 180,000-tensor repo,
// before a collection.
const streamHeadroom = 48 << 20

// loadStreaming is loadCheckpoint for the commands that then stream a
// module's bytes (decode, stats, quantize, report, forward, calibrate).
// Over the network their resident memory is the checkpoint's plus about
// 50 MB (cache, read-ahead buffers, headroom), whatever the module's size:
// `stats` of a 1.9 GB BF16 embedding peaks within 20 MB of `stats` of an
// 8 MB module of the same 180,000-tensor repo (TestRemoteStreamMemory
// holds a 235 MB module to 40 MB). decode and stats add nothing else;
// quantize and report hold the module's float32 weight, forward a layer's.
// Given modules (the one a command works on, with --index-shards), it
// reads only the shards the index names for them (loadModules).
func loadStreaming(ctx context.Context, source string, sf sourceFlags, modules ...string) (*checkpoint.Checkpoint, error) {
	c, err := loadModules(ctx, source, sf, modules)
	if err != nil {
		return nil, err
	}
	holdStreamHeap()
	return c, nil
}

// holdStreamHeap collects the load's garbage and sets the collector's
// target so that the heap grows by about streamHeadroom over what is live
// now: the checkpoint, which the rest of the run keeps. Its cost is one
// collection of that heap (about 20 ms for 110 MB on this 2-core VM) and a
// collection per streamHeadroom of garbage, where the default target would
// run one per 110 MB. The percentage never goes under 25, so that a
// run that later holds much more (quantize's float32 weight, a forward's
// layers) is not collected over and over.
func holdStreamHeap() {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	debug.SetGCPercent(streamGCPercent(s[0].Value.Uint64()))
}

// streamGCPercent is the GOGC that gives live bytes of heap about
// streamHeadroom of room: between 25 and the default 100.
func streamGCPercent(live uint64) int {
	if live == 0 {
		return 100
	}
	return int(min(100, max(25, streamHeadroom*100/live)))
}

// indexShards is a module command's --index-shards: read only the shards
// the index names for the module's tensors (checkpoint.Options.Modules).
// It is not the default because it trusts the index: a tensor of the
// module that the index leaves out, in a shard it does not name for the
// module, is not seen, and the module is then decoded without it (no header
// read can tell; a runtime loads every tensor of every shard).
type indexShards struct{ on *bool }

func indexShardsFlag(fs *flag.FlagSet) indexShards {
	return indexShards{fs.Bool("index-shards", false, "read only the shards model.safetensors.index.json names for the module's tensors, not every shard's header (faster on a repo of many shards; trusts the index: a tensor of the module it leaves out is not seen)")}
}

// modules is what loadStreaming is given: the module, with the flag.
func (f indexShards) modules(module string) []string {
	if *f.on {
		return []string{module}
	}
	return nil
}
