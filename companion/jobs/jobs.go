// Package jobs runs the companion's heavy operations for websocket clients:
// one Manager per server, and per connection one reader goroutine (the one
// that calls Serve), one writer goroutine, a bounded send queue (a client
// that falls behind is dropped), write deadlines and ping/pong. Each job's
// context derives from its connection's, so a disconnect cancels its jobs; a
// cancel message is answered at once; progress is forwarded at least every
// 250 ms. The job reads its source itself through the Loader (never through
// the browser), keeps loaded checkpoints for a while so that jobs on the same
// repo share one header read, and runs the op registered in companion/ops
// under the name the submit gives.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/kernels"
)

// Loader reads the checkpoint a submit names (source, revision, endpoint,
// hub token), reporting header progress. It must honour ctx.
type Loader func(ctx context.Context, sub proto.Submit, progress func(checkpoint.Progress)) (*checkpoint.Checkpoint, error)

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	Backend      kernels.Backend // where kernels run
	Load         Loader
	Hello        proto.Hello   // sent first on every connection (Protocol, Ops and Limits are filled in)
	MaxJobs      int           // unanswered jobs per connection (default 4)
	MaxJobsTotal int           // running jobs across connections (default 8)
	ReadLimit    int64         // largest message a client may send (default 256 KiB)
	SendQueue    int           // queued outgoing messages before a client counts as slow (default 64)
	WriteWait    time.Duration // deadline of each write (default 10 s)
	PongWait     time.Duration // a connection silent this long is closed (default 60 s; pings at 9/10 of it)
	CacheTTL     time.Duration // how long an unused loaded checkpoint is kept (default 2 min)
	WriteDir     string        // passed to ops as Env.WriteDir
	ReadDir      string        // the only folder a job's parameters may name files under (ops.LocalReads); empty: none
}

// Manager runs jobs for every connection of one server.
type Manager struct {
	opt     Options
	running chan struct{} // one token per running job, across connections
	cache   *cache
}

// New makes a Manager.
func New(opt Options) *Manager {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opt.MaxJobs, 4)
	def(&opt.MaxJobsTotal, 8)
	def(&opt.SendQueue, 64)
	if opt.ReadLimit <= 0 {
		opt.ReadLimit = 256 << 10
	}
	if opt.WriteWait <= 0 {
		opt.WriteWait = 10 * time.Second
	}
	if opt.PongWait <= 0 {
		opt.PongWait = 60 * time.Second
	}
	if opt.CacheTTL <= 0 {
		opt.CacheTTL = 2 * time.Minute
	}
	opt.Hello.Protocol = proto.Version
	opt.Hello.Ops = ops.Names()
	if opt.Hello.GPUs == nil {
		opt.Hello.GPUs = []proto.GPU{}
	}
	opt.Hello.Limits = proto.Limits{MaxMessageBytes: opt.ReadLimit, MaxJobs: opt.MaxJobs, MaxJobsTotal: opt.MaxJobsTotal}
	return &Manager{opt: opt, running: make(chan struct{}, opt.MaxJobsTotal), cache: newCache(opt.CacheTTL, opt.Load)}
}

// Hello is what the Manager sends first on every connection.
func (m *Manager) Hello() proto.Hello { return m.opt.Hello }

// Close releases the cached checkpoints.
func (m *Manager) Close() { m.cache.close() }

// outgoing is one websocket message.
type outgoing struct {
	kind int // websocket.TextMessage or BinaryMessage
	data []byte
}

// conn is one client connection.
type conn struct {
	m      *Manager
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	send   chan []outgoing // a batch (a result and its frames) is queued whole
	closed sync.Once

	mu   sync.Mutex
	jobs map[string]*job // unanswered jobs
	live int             // job goroutines still running, answered (cancelled) or not
	wg   sync.WaitGroup  // job goroutines
}

// Serve runs one websocket connection until the client goes, the server's
// ctx ends, or the client is too slow; it returns when every job of the
// connection has stopped. The calling goroutine is the connection's reader.
func (m *Manager) Serve(ctx context.Context, ws *websocket.Conn) {
	c := &conn{m: m, ws: ws, send: make(chan []outgoing, m.opt.SendQueue), jobs: map[string]*job{}}
	c.ctx, c.cancel = context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() { c.writer(); close(writerDone) }()
	stop := context.AfterFunc(c.ctx, c.close) // server shutdown or a dropped client unblocks the reader
	c.queue(m.opt.Hello)
	c.reader()
	c.cancel()
	stop()
	c.close()
	<-writerDone
	c.wg.Wait()
}

// close ends the connection: jobs are cancelled, reads and writes fail.
func (c *conn) close() {
	c.closed.Do(func() {
		c.cancel()
		c.ws.Close()
	})
}

func (c *conn) writer() {
	ping := time.NewTicker(c.m.opt.PongWait * 9 / 10)
	defer ping.Stop()
	for {
		select {
		case batch := <-c.send:
			for _, o := range batch {
				c.ws.SetWriteDeadline(time.Now().Add(c.m.opt.WriteWait))
				if err := c.ws.WriteMessage(o.kind, o.data); err != nil {
					c.close()
					return
				}
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.m.opt.WriteWait)); err != nil {
				c.close()
				return
			}
		case <-c.ctx.Done():
			c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		}
	}
}

// enqueue queues a batch without blocking; a full queue drops the client.
func (c *conn) enqueue(batch []outgoing) {
	select {
	case c.send <- batch:
	default:
		c.close() // too slow to keep up: bounded memory wins
	}
}

// queue encodes and queues one message.
func (c *conn) queue(m proto.Message) {
	b, err := proto.Encode(m)
	if err != nil {
		b, _ = proto.Encode(proto.Error{Code: proto.CodeFailed, Message: err.Error()})
	}
	c.enqueue([]outgoing{{websocket.TextMessage, b}})
}

func (c *conn) reader() {
	c.ws.SetReadLimit(c.m.opt.ReadLimit)
	c.ws.SetReadDeadline(time.Now().Add(c.m.opt.PongWait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(c.m.opt.PongWait)) })
	for {
		kind, data, err := c.ws.ReadMessage()
		if errors.Is(err, websocket.ErrReadLimit) {
			// gorilla has sent the close frame (1009). The rest of the
			// message is still unread: closing the socket now would answer
			// it with a reset, and a browser would drop the close frame and
			// see 1006. Half-close (the client, seeing the end, closes its
			// side) and read on until it does, 2 s at most.
			nc := c.ws.UnderlyingConn()
			if tc, ok := nc.(interface{ CloseWrite() error }); ok {
				tc.CloseWrite()
			}
			nc.SetReadDeadline(time.Now().Add(2 * time.Second))
			io.Copy(io.Discard, io.LimitReader(nc, 64<<20))
			return
		}
		if err != nil {
			return // closed, or silent past PongWait
		}
		c.ws.SetReadDeadline(time.Now().Add(c.m.opt.PongWait))
		if kind != websocket.TextMessage {
			c.queue(proto.Error{Code: proto.CodeBadRequest, Message: "the companion takes only JSON text messages"})
			continue
		}
		msg, err := proto.Decode(data)
		if err != nil {
			c.queue(proto.Error{Code: proto.CodeBadRequest, Message: err.Error()})
			continue
		}
		switch m := msg.(type) {
		case proto.Submit:
			c.submit(m)
		case proto.Cancel:
			c.cancelJob(m.ID)
		default:
			c.queue(proto.Error{Code: proto.CodeBadRequest, Message: fmt.Sprintf("a client does not send %T messages", msg)})
		}
	}
}

func (c *conn) submit(s proto.Submit) {
	fail := func(code, format string, a ...any) {
		c.queue(proto.Error{ID: s.ID, Code: code, Message: fmt.Sprintf(format, a...)})
	}
	if err := s.Check(); err != nil {
		fail(proto.CodeBadRequest, "%v", err)
		return
	}
	op, ok := ops.Lookup(s.Op)
	if !ok {
		fail(proto.CodeBadRequest, "unknown op %q (this companion runs: %v)", s.Op, ops.Names())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.jobs[s.ID]; dup {
		fail(proto.CodeBadRequest, "job %q is already running", s.ID)
		return
	}
	// A cancelled job is answered at once but counts until its op stops, so
	// cancelling and resubmitting cannot run more than the limit.
	if c.live >= c.m.opt.MaxJobs {
		fail(proto.CodeLimit, "%d jobs are running on this connection, the limit (a cancelled one counts until it stops); wait for one or cancel one", c.live)
		return
	}
	select {
	case c.m.running <- struct{}{}:
	default:
		fail(proto.CodeLimit, "%d jobs are running on this companion, the limit; try again when one ends", c.m.opt.MaxJobsTotal)
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	j := &job{id: s.ID, cancel: cancel, start: time.Now(), conn: c}
	c.jobs[s.ID] = j
	c.live++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.m.running }()
		defer func() {
			c.mu.Lock()
			c.live--
			c.mu.Unlock()
		}()
		defer cancel()
		j.run(ctx, s, op)
	}()
}

// cancelJob answers a cancel at once; the job's goroutine stops when its
// op next checks the context.
func (c *conn) cancelJob(id string) {
	c.mu.Lock()
	j := c.jobs[id]
	c.mu.Unlock()
	if j == nil {
		c.queue(proto.Error{ID: id, Code: proto.CodeBadRequest, Message: fmt.Sprintf("no running job %q", id)})
		return
	}
	j.cancel()
	j.finish(proto.Error{ID: id, Code: proto.CodeCancelled, Message: "cancelled"})
}

// answered forgets a job once its final message is queued.
func (c *conn) answered(j *job) {
	c.mu.Lock()
	if c.jobs[j.id] == j {
		delete(c.jobs, j.id)
	}
	c.mu.Unlock()
}

// resultBatch turns an op's result into the result message and its frames.
func resultBatch(id string, r *ops.Result, note string, elapsed time.Duration) (proto.Result, []outgoing, error) {
	js, err := json.Marshal(r.JSON)
	if err != nil {
		var uv *json.UnsupportedValueError
		if errors.As(err, &uv) {
			return proto.Result{}, nil, fmt.Errorf("rule finite-result: the result holds %s, which JSON cannot carry (a weight or an input is not finite): %w", uv.Str, err)
		}
		return proto.Result{}, nil, fmt.Errorf("encoding the result: %w", err)
	}
	msg := proto.Result{ID: id, JSON: js, Arrays: []proto.ArrayDesc{}, Note: note, ElapsedMS: elapsed.Milliseconds()}
	var frames []outgoing
	add := func(f proto.Frame) error {
		b, err := proto.EncodeFrame(f)
		if err != nil {
			return err
		}
		msg.Arrays = append(msg.Arrays, f.Desc())
		frames = append(frames, outgoing{websocket.BinaryMessage, b})
		return nil
	}
	for _, a := range r.Arrays {
		f := proto.Frame{ID: id, Name: a.Name, Shape: a.Shape}
		switch {
		case a.F32 != nil:
			f.DType, f.Data = proto.F32, proto.F32Data(a.F32)
		case a.I64 != nil:
			f.DType, f.Data = proto.I64, proto.I64Data(a.I64)
		default:
			f.DType, f.Data = proto.U8, a.U8
		}
		if err := add(f); err != nil {
			return proto.Result{}, nil, err
		}
	}
	for _, file := range r.Files {
		d := proto.FileDesc{Name: file.Name, Path: file.Path, Size: int64(len(file.Data))}
		if file.Path == "" {
			if err := add(proto.Frame{ID: id, Name: "file:" + file.Name, DType: proto.U8, Shape: []int{len(file.Data)}, Data: file.Data}); err != nil {
				return proto.Result{}, nil, err
			}
		}
		msg.Files = append(msg.Files, d)
	}
	return msg, frames, nil
}
