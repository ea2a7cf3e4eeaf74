package jobs

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// Progress pacing: the latest state every progressEvery, whether or not it
// changed (a silent op gets a heartbeat), coalescing however often the op
// reports; the promise to clients is one at least every 250 ms, which leaves
// 150 ms for a busy machine's scheduling.
const progressEvery = 100 * time.Millisecond

// job is one submitted operation.
type job struct {
	id     string
	cancel context.CancelFunc
	start  time.Time
	conn   *conn

	mu       sync.Mutex // guards answered and the progress state; held while queueing
	answered bool       // a result or error was queued: nothing more is sent
	phase    string
	note     string
	done     int64
	total    int64
}

// set records progress; it never blocks on the network.
func (j *job) set(phase string, done, total int64) {
	j.mu.Lock()
	j.phase, j.done, j.total = phase, done, total
	j.mu.Unlock()
}

func (j *job) setNote(note string) {
	j.mu.Lock()
	j.note = note
	j.mu.Unlock()
}

// finish queues the job's final message (and frames) unless one was queued
// already.
func (j *job) finish(msg proto.Message, frames ...outgoing) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.answered {
		return
	}
	j.answered = true
	b, err := proto.Encode(msg)
	if err != nil {
		b, _ = proto.Encode(proto.Error{ID: j.id, Code: proto.CodeFailed, Message: err.Error()})
		frames = nil
	}
	j.conn.enqueue(append([]outgoing{{websocket.TextMessage, b}}, frames...))
	j.conn.answered(j)
}

// reportProgress sends the latest state every progressEvery until stop is
// closed.
func (j *job) reportProgress(stop <-chan struct{}) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			j.mu.Lock()
			if !j.answered {
				b, _ := proto.Encode(proto.Progress{ID: j.id, Phase: j.phase, Done: j.done, Total: j.total,
					ElapsedMS: time.Since(j.start).Milliseconds(), Note: j.note})
				j.conn.enqueue([]outgoing{{websocket.TextMessage, b}})
			}
			j.mu.Unlock()
		}
	}
}

// run loads the source (or takes it from the cache), runs the op and
// queues the answer. A cancelled job was answered by the cancel already.
func (j *job) run(ctx context.Context, s proto.Submit, op ops.Op) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); j.reportProgress(stop) }()
	defer wg.Wait()
	defer close(stop)
	defer func() {
		if p := recover(); p != nil {
			j.finish(proto.Error{ID: j.id, Code: proto.CodeFailed, Message: fmt.Sprintf("internal error in %s: %v", s.Op, p)})
			fmt.Fprintf(os.Stderr, "quantscope: job %s (%s) panicked: %v\n%s", j.id, s.Op, p, debug.Stack())
		}
	}()
	j.set("headers", 0, 0)
	ck, shared, release, err := j.conn.m.cache.get(ctx, s, func(p checkpoint.Progress) { j.set("headers", int64(p.ShardsDone), int64(p.Shards)) },
		func() { j.set("waiting", 0, 0) })
	if err != nil {
		j.fail(ctx, err)
		return
	}
	defer release()
	note := originNote(ck.Source)
	if shared {
		note += " (headers already read by an earlier job)"
	}
	j.setNote(note)
	j.set(s.Op, 0, 0)
	res, err := op(ctx, ops.Env{Checkpoint: ck, Backend: j.conn.m.opt.Backend, WriteDir: j.conn.m.opt.WriteDir,
		Reads:    ops.LocalReads{Confined: true, Dir: j.conn.m.opt.ReadDir},
		Progress: func(done, total int64) { j.set(s.Op, done, total) }}, s.Module, s.Params)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		j.fail(ctx, err)
		return
	}
	if res == nil {
		res = &ops.Result{}
	}
	msg, frames, err := resultBatch(j.id, res, note, time.Since(j.start))
	if err != nil {
		j.fail(ctx, err)
		return
	}
	j.finish(msg, frames...)
}

func (j *job) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		j.finish(proto.Error{ID: j.id, Code: proto.CodeCancelled, Message: "cancelled"})
		return
	}
	j.finish(errorMessage(j.id, err))
}

// originNote says where a job's bytes were read from.
func originNote(src hub.Source) string {
	kind, where := hub.Origin(src)
	switch kind {
	case "hf-cache":
		return "read from the Hugging Face cache at " + where
	case "local":
		return "read from the local path " + where
	}
	return "read over the network from " + where
}
