package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// stubborn holds test-stubborn jobs until it is closed.
var stubborn = make(chan struct{})

// Test ops, registered once for the package's tests.
func init() {
	ops.Register("test-chatty", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		// Reports progress as fast as it can for 600 ms: the manager must coalesce.
		end := time.Now().Add(600 * time.Millisecond)
		for i := int64(0); time.Now().Before(end); i++ {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			env.Progress(i, 0)
		}
		return &ops.Result{JSON: "done"}, nil
	})
	ops.Register("test-block", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ops.Register("test-stubborn", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		<-stubborn // ignores cancel until the test lets it go
		return nil, ctx.Err()
	})
	ops.Register("test-nan", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		return &ops.Result{JSON: map[string]float64{"mse": math.NaN()}}, nil
	})
	ops.Register("test-arrays", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		var p struct{ Big int }
		if err := ops.DecodeParams("test-arrays", params, &p); err != nil {
			return nil, err
		}
		return &ops.Result{JSON: map[string]int{"n": 3},
			Arrays: []ops.Array{{Name: "f", Shape: []int{1, 3}, F32: []float32{1, 2, 3}}, {Name: "i", Shape: []int{2}, I64: []int64{-5, 7}}, {Name: "b", Shape: []int{p.Big}, U8: make([]byte, p.Big)}},
			Files:  []ops.File{{Name: "q.safetensors", Data: []byte("abc")}, {Name: "w.safetensors", Path: "/tmp/w.safetensors"}}}, nil
	})
	ops.Register("test-panic", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		var m map[string]int
		m["x"] = 1
		return nil, nil
	})
	ops.Register("test-fail", func(ctx context.Context, env ops.Env, module string, params json.RawMessage) (*ops.Result, error) {
		switch module {
		case "format":
			return nil, &safetensors.FormatError{File: "a.safetensors", Tensor: "w", Rule: "offsets", Msg: "hole", Offset: -1}
		case "dequant":
			return nil, errors.Join(errors.New("reading"), &scheme.DequantError{Module: "m", Tensor: "m.weight_scale", Rule: "scale-shape", Msg: "bad"})
		}
		return nil, errors.New("x.json: rule index-missing-shard: gone")
	})
}

type fixture struct {
	m     *Manager
	url   string
	loads atomic.Int64
}

// newFixture serves a Manager on an httptest server; its Loader reads a
// synth repo from a local folder after delay, reporting 4 shards of progress.
func newFixture(t *testing.T, opt Options, delay time.Duration) *fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := synth.ModelOptNVFP4().WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	opt.Backend = cpu.New()
	opt.Load = func(ctx context.Context, s proto.Submit, progress func(checkpoint.Progress)) (*checkpoint.Checkpoint, error) {
		f.loads.Add(1)
		if strings.HasSuffix(s.Source, "panics") || strings.HasSuffix(s.Source, "panics/") {
			panic("loader bug")
		}
		for i := range 4 {
			progress(checkpoint.Progress{ShardsDone: i, Shards: 4})
			select {
			case <-time.After(delay / 4):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		src, _ := hub.OpenLocal(dir)
		return checkpoint.Load(ctx, src, checkpoint.Options{})
	}
	f.m = New(opt)
	t.Cleanup(f.m.Close)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		f.m.Serve(context.Background(), ws)
	}))
	t.Cleanup(srv.Close)
	f.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return f
}

type tclient struct {
	t  *testing.T
	ws *websocket.Conn
}

func (f *fixture) dial(t *testing.T) *tclient {
	ws, _, err := websocket.DefaultDialer.Dial(f.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &tclient{t, ws}
	if _, ok := c.read().(proto.Hello); !ok {
		t.Fatal("no hello first")
	}
	return c
}

func (c *tclient) send(m proto.Message) {
	b, _ := proto.Encode(m)
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next text message, or a proto.Frame for a binary one.
func (c *tclient) read() any {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	kind, b, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if kind == websocket.BinaryMessage {
		fr, err := proto.ParseFrame(b)
		if err != nil {
			c.t.Fatal(err)
		}
		return fr
	}
	m, err := proto.Decode(b)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// final skips progress until id's result or error.
func (c *tclient) final(id string) (any, []proto.Progress) {
	c.t.Helper()
	var prog []proto.Progress
	for {
		switch m := c.read().(type) {
		case proto.Progress:
			if m.ID == id {
				prog = append(prog, m)
			}
		case proto.Result:
			if m.ID == id {
				return m, prog
			}
		case proto.Error:
			if m.ID == id {
				return m, prog
			}
		}
	}
}

// accepted reads until id reports progress (true) or is refused for a limit
// (false).
func (c *tclient) accepted(id string) bool {
	c.t.Helper()
	for {
		switch m := c.read().(type) {
		case proto.Progress:
			if m.ID == id {
				return true
			}
		case proto.Error:
			if m.ID == id {
				if m.Code != proto.CodeLimit {
					c.t.Fatalf("%+v", m)
				}
				return false
			}
		}
	}
}

func sub(id, op, module string) proto.Submit {
	return proto.Submit{ID: id, Op: op, Source: "repo", Module: module}
}

func TestProgressCoalescedAndHeartbeat(t *testing.T) {
	f := newFixture(t, Options{}, 800*time.Millisecond)
	c := f.dial(t)
	c.send(sub("j", "test-chatty", ""))
	res, prog := c.final("j")
	if _, ok := res.(proto.Result); !ok {
		t.Fatalf("final %#v", res)
	}
	// At most one message per 100 ms tick (coalesced, though the op reported
	// millions of times), and never silent for long.
	ms := res.(proto.Result).ElapsedMS
	if n := int64(len(prog)); n > ms/progressEvery.Milliseconds()+1 || n < ms/250-1 {
		t.Fatalf("%d progress messages for a %d ms job", len(prog), ms)
	}
	sawHeaders, sawOp := false, false
	for _, p := range prog {
		sawHeaders = sawHeaders || (p.Phase == "headers" && p.Total == 4)
		sawOp = sawOp || (p.Phase == "test-chatty" && p.Done > 1000)
	}
	if !sawHeaders || !sawOp {
		t.Errorf("phases missing: %+v", prog)
	}
}

func TestResultFramesFollowInOrder(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	c := f.dial(t)
	c.send(proto.Submit{ID: "a", Op: "test-arrays", Source: "repo", Params: json.RawMessage(`{"Big":100000}`)})
	res, _ := c.final("a")
	r := res.(proto.Result)
	if string(r.JSON) != `{"n":3}` || len(r.Arrays) != 4 || len(r.Files) != 2 || r.Files[1].Path != "/tmp/w.safetensors" {
		t.Fatalf("result %+v", r)
	}
	for i, d := range r.Arrays {
		fr, ok := c.read().(proto.Frame)
		if !ok || fr.ID != "a" || fr.Name != d.Name || fr.DType.String() != d.DType {
			t.Fatalf("frame %d: %+v, descriptor %+v", i, fr, d)
		}
		switch d.Name {
		case "f":
			v, _ := fr.Float32s()
			if len(v) != 3 || v[2] != 3 {
				t.Errorf("f32 frame %v", v)
			}
		case "i":
			v, _ := fr.Int64s()
			if len(v) != 2 || v[0] != -5 {
				t.Errorf("i64 frame %v", v)
			}
		case "file:q.safetensors":
			if string(fr.Data) != "abc" {
				t.Errorf("file frame %q", fr.Data)
			}
		}
	}
}

func TestErrorsCarryRuleAndTensor(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	c := f.dial(t)
	for module, want := range map[string]proto.Error{
		"format":  {Rule: "offsets", Tensor: "w", File: "a.safetensors"},
		"dequant": {Rule: "scale-shape", Tensor: "m.weight_scale", Module: "m"},
		"text":    {Rule: "index-missing-shard"},
	} {
		c.send(sub(module, "test-fail", module))
		res, _ := c.final(module)
		e := res.(proto.Error)
		if e.Code != proto.CodeFailed || e.Rule != want.Rule || e.Tensor != want.Tensor || e.File != want.File || e.Module != want.Module {
			t.Errorf("%s: %+v, want %+v", module, e, want)
		}
	}
	c.send(sub("p", "test-panic", ""))
	if res, _ := c.final("p"); !strings.Contains(res.(proto.Error).Message, "internal error in test-panic") {
		t.Errorf("panic: %+v", res)
	}
	// A loader that panics fails its job, and the next job on that source
	// is not left waiting for it.
	// So with a path spelled apart from its cache key (on a connection of
	// its own: a panicked job's slot frees a moment after its error).
	c2 := f.dial(t)
	for _, j := range []struct {
		c          *tclient
		id, source string
	}{{c, "lp1", "panics"}, {c, "lp2", "panics"}, {c2, "lp3", ".//panics/"}, {c2, "lp4", "./panics"}} {
		j.c.send(proto.Submit{ID: j.id, Op: "test-arrays", Source: j.source})
		if res, _ := j.c.final(j.id); !strings.Contains(res.(proto.Error).Message, "internal error") || !strings.Contains(res.(proto.Error).Message, "loader bug") {
			t.Errorf("%s: %+v", j.id, res)
		}
	}
	// The connection survives all of it.
	c.send(sub("ok", "test-arrays", ""))
	if res, _ := c.final("ok"); res.(proto.Result).ID != "ok" {
		t.Fatal(res)
	}
	// Bad requests: malformed, duplicate id, binary.
	c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"submit","id":"x","op":"inventory"}`))
	if res, _ := c.final("x"); res.(proto.Error).Code != proto.CodeBadRequest {
		t.Errorf("no source: %+v", res)
	}
	c.send(sub("dup", "test-block", ""))
	c.send(sub("dup", "test-block", ""))
	if res, _ := c.final("dup"); !strings.Contains(res.(proto.Error).Message, "already running") {
		t.Errorf("duplicate: %+v", res)
	}
}

// Two jobs on one source share one load, also when the first is cancelled
// while loading.
func TestCheckpointShared(t *testing.T) {
	f := newFixture(t, Options{}, 400*time.Millisecond)
	c := f.dial(t)
	c.send(sub("first", "test-block", ""))
	for { // first is loading
		if p, ok := c.read().(proto.Progress); ok && p.ID == "first" && p.Total == 4 {
			break
		}
	}
	c.send(sub("second", "test-arrays", ""))
	for { // second waits for first's load
		if p, ok := c.read().(proto.Progress); ok && p.ID == "second" && p.Phase == "waiting" {
			break
		}
	}
	c.send(proto.Cancel{ID: "first"})
	if res, _ := c.final("first"); res.(proto.Error).Code != proto.CodeCancelled {
		t.Fatalf("cancel: %+v", res)
	}
	res, _ := c.final("second")
	r, ok := res.(proto.Result)
	if !ok {
		t.Fatalf("second: %+v", res)
	}
	if f.loads.Load() != 2 || strings.Contains(r.Note, "already read") {
		t.Errorf("second job: %d loads (the first load was cancelled, so 2), note %q", f.loads.Load(), r.Note)
	}
	c.send(sub("third", "test-arrays", ""))
	res, _ = c.final("third")
	if r = res.(proto.Result); !strings.Contains(r.Note, "already read") || f.loads.Load() != 2 {
		t.Errorf("third job: %q, %d loads", r.Note, f.loads.Load())
	}
	// A path spelled another way is the same checkpoint; a path is not the
	// repo of the same name (ORG/NAME may be read from the hub).
	for i, spelling := range []string{"./repo", "./repo/", ".//repo/."} {
		s := sub(spelling, "test-arrays", "")
		s.Source = spelling
		c.send(s)
		res, _ = c.final(spelling)
		r, ok := res.(proto.Result)
		if shared := strings.Contains(r.Note, "already read"); !ok || shared != (i > 0) || f.loads.Load() != 3 {
			t.Errorf("source %q: %+v, %d loads", spelling, res, f.loads.Load())
		}
	}
}

// A client that stops reading is dropped instead of growing the queue.
func TestSlowClientDropped(t *testing.T) {
	f := newFixture(t, Options{SendQueue: 2, WriteWait: time.Second, MaxJobs: 8, MaxJobsTotal: 8}, 0)
	c := f.dial(t)
	for i := range 8 {
		// The companion may drop this client before it has sent all eight
		// (the first results already fill its queue): a failed send is that.
		b, _ := proto.Encode(proto.Submit{ID: string(rune('a' + i)), Op: "test-arrays", Source: "repo", Params: json.RawMessage(`{"Big":8000000}`)})
		if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Logf("dropped after %d submits: %v", i, err)
			break
		}
	}
	time.Sleep(3 * time.Second) // read nothing while 64 MB are due
	results := 0
	c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			break
		}
		if m, err := proto.Decode(b); err == nil {
			if _, ok := m.(proto.Result); ok {
				results++
			}
		}
	}
	if results == 8 {
		t.Fatal("a client that read nothing for 3 s got all 64 MB: nothing bounds the queue")
	}
	t.Logf("%d of 8 results reached the slow client before it was dropped", results)
}

func TestLimits(t *testing.T) {
	f := newFixture(t, Options{MaxJobs: 1, MaxJobsTotal: 2}, 0)
	a, b, c := f.dial(t), f.dial(t), f.dial(t)
	a.send(sub("a1", "test-block", ""))
	a.send(sub("a2", "test-block", ""))
	if res, _ := a.final("a2"); !strings.Contains(res.(proto.Error).Message, "on this connection") {
		t.Fatalf("per connection: %+v", res)
	}
	b.send(sub("b1", "test-block", ""))
	if !b.accepted("b1") {
		t.Fatal("b1 refused")
	}
	c.send(sub("c1", "test-block", ""))
	if res, _ := c.final("c1"); !strings.Contains(res.(proto.Error).Message, "on this companion") {
		t.Fatalf("total: %+v", res)
	}
	b.ws.Close() // a disconnect ends b1 and frees its slot
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := "c" + string(rune('a'+i%26))
		c.send(sub(id, "test-block", ""))
		if c.accepted(id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's job kept its slot after b disconnected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A result holding a NaN, which JSON cannot carry, comes back as an error
// with a rule that says so, not as an encoder's bare complaint.
func TestNonFiniteResult(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	c := f.dial(t)
	c.send(sub("n", "test-nan", ""))
	res, _ := c.final("n")
	if e, ok := res.(proto.Error); !ok || !strings.Contains(e.Message, "rule finite-result") || !strings.Contains(e.Message, "NaN") {
		t.Fatalf("%+v", res)
	}
}

// A cancelled job is answered at once but holds its connection's slot
// until its op stops: cancelling and resubmitting cannot run more jobs
// than the limit.
func TestCancelledJobHoldsSlot(t *testing.T) {
	f := newFixture(t, Options{MaxJobs: 1, MaxJobsTotal: 4}, 0)
	release := sync.OnceFunc(func() { close(stubborn) })
	t.Cleanup(release) // before the fixture's own cleanup, which waits for the job
	a := f.dial(t)
	a.send(sub("s1", "test-stubborn", ""))
	if !a.accepted("s1") {
		t.Fatal("s1 refused")
	}
	a.send(proto.Cancel{ID: "s1"})
	if res, _ := a.final("s1"); res.(proto.Error).Code != proto.CodeCancelled {
		t.Fatalf("cancel: %+v", res)
	}
	a.send(sub("s2", "test-block", ""))
	if a.accepted("s2") {
		t.Fatal("a submit while the cancelled job still runs was accepted")
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := "t" + string(rune('a'+i%26))
		a.send(sub(id, "test-block", ""))
		if a.accepted(id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot stayed taken after the cancelled job stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that answers pings stays connected past PongWait; one that
// stops reading (and so answering) is closed.
func TestPingPong(t *testing.T) {
	// Generous times: on a loaded machine a live client may answer late.
	f := newFixture(t, Options{PongWait: time.Second}, 0)
	live, dead := f.dial(t), f.dial(t)
	done := make(chan error, 1)
	go func() { // live reads (gorilla's client answers pings while reading)
		live.ws.SetReadDeadline(time.Now().Add(4500 * time.Millisecond))
		_, _, err := live.ws.ReadMessage()
		done <- err
	}()
	time.Sleep(3500 * time.Millisecond) // three and a half PongWaits: dead reads nothing meanwhile
	dead.ws.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, _, err := dead.ws.ReadMessage(); err == nil || !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseAbnormalClosure) && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("a client that answered no ping for 3.5 s: read %v, want the connection closed", err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("a client answering pings: %v, want still open (its own read deadline)", err)
	}
}
