// Package session is the page's model, kept out of the js files so that it
// compiles and is tested natively: open a remote SOURCE over a Fetcher, read
// its inventory (keeping what was read when a shard fails), and sample a
// module's rows with their statistics, histogram, code frequencies and scale
// distribution. It has no syscall/js; wasm/ is the thin skin around it.
package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/fit"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Options configure Open.
type Options struct {
	Endpoint string // for ORG/NAME sources; default the real hub
	Revision string // overrides a revision in the SOURCE
	Token    string // sent as a Bearer header to the hub's host only
	// TokenHosts, when not nil, are the hosts besides hub.OfficialHosts that
	// Token may go to (the page's own server, endpoints its user chose); to
	// any other (a hub only a link or a SOURCE URL names) it is not sent.
	TokenHosts []string
	Fetcher    hub.Fetcher // the browser's fetch in wasm; net/http in tests
	Progress   func(checkpoint.Progress)
	Trace      func(phase string)
}

// Session is one opened repo.
type Session struct {
	ck       *checkpoint.Checkpoint
	src      hub.Source
	inv      *checkpoint.Inventory
	byModule map[string][]checkpoint.TensorEntry
	fitPlan  *fit.Plan // FitJSON's placed modules, made once
}

// pageParallel bounds the requests in flight (the CLI's default is 20). A
// shard's slot is held from its request until its header is parsed; in the
// browser the requests are sent by another thread than the one parsing
// (web/engine.js), and over HTTP/2 they share one connection, so more of
// them in flight let the bodies wait for the parser instead of the parser
// for the network. pageTimeout bounds each request, queued in the browser
// and sharing the link with the others: 48 headers of 300 KB at 0.5 MB/s
// take 29 s.
const (
	pageParallel = 48
	pageTimeout  = time.Minute
)

// Open reads a remote SOURCE's inventory.
func Open(ctx context.Context, source string, opt Options) (*Session, error) {
	spec, err := hub.ParseSource(source, opt.Endpoint)
	if err != nil {
		return nil, err
	}
	withheld := ""
	if opt.Token != "" && opt.TokenHosts != nil && !slices.Contains(opt.TokenHosts, spec.Host()) && !slices.Contains(hub.OfficialHosts, spec.Host()) {
		opt.Token, withheld = "", spec.Host()
	}
	opts := []hub.Option{hub.WithToken(opt.Token), hub.WithParallel(pageParallel), hub.WithTimeout(pageTimeout)}
	if opt.Fetcher != nil {
		opts = append(opts, hub.WithFetcher(opt.Fetcher))
	}
	src, err := hub.OpenSpec(ctx, spec, opt.Revision, opts...)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.Load(ctx, src, checkpoint.Options{KeepGoing: true, Parallel: pageParallel, Progress: opt.Progress, Trace: opt.Trace})
	if err != nil {
		if withheld != "" {
			err = fmt.Errorf("%w (the token was not sent to %s: no endpoint chosen in Settings names it)", err, withheld)
		}
		return nil, err
	}
	return &Session{ck: ck, src: src}, nil
}

// InventoryJSON is the inventory as `inspect --json` prints it. Without
// tensors its "tensors" is null and modules[] carry no role → tensor maps:
// a large repo lists hundreds of thousands of tensors, which the page asks
// for only when it shows them (TensorsJSON, ModuleTensorsJSON).
func (s *Session) InventoryJSON(withTensors bool) ([]byte, error) {
	var inv *checkpoint.Inventory
	if withTensors {
		inv = s.full()
	} else {
		inv = s.ck.InventoryWithoutTensors()
		inv.OmitModuleTensors = true
	}
	var b bytes.Buffer
	if err := inv.WriteJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (s *Session) full() *checkpoint.Inventory {
	if s.inv == nil {
		s.inv = s.ck.Inventory()
	}
	return s.inv
}

// TensorsJSON is the inventory's tensors[] alone.
func (s *Session) TensorsJSON() ([]byte, error) { return json.Marshal(s.full().Tensors) }

// ModuleTensorsJSON lists one module's tensors, as in tensors[].
func (s *Session) ModuleTensorsJSON(module string) ([]byte, error) {
	if s.byModule == nil {
		s.byModule = map[string][]checkpoint.TensorEntry{}
		for _, t := range s.full().Tensors {
			s.byModule[t.Module] = append(s.byModule[t.Module], t)
		}
	}
	ts, ok := s.byModule[module]
	if !ok {
		return nil, fmt.Errorf("no module %q", module)
	}
	return json.Marshal(ts)
}

// Limits on one sample, so that a click never asks for a whole tensor.
const (
	MaxSampleRows   = 64
	MaxSampleValues = 1 << 20
	// SampleWindow is how many input columns a GPTQ or AWQ sample decodes:
	// those layouts pack along the input dimension, so a sample of whole
	// rows would read the whole qweight.
	SampleWindow = 256
)

// Histogram is counts of values in equal bins over [Lo, Hi].
type Histogram struct {
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	Counts []int   `json:"counts"`
	Log2   bool    `json:"log2,omitempty"` // bins are over log2 of the magnitudes
}

// SampleView is a sample with what the page draws from it.
type SampleView struct {
	*scheme.Sample
	Format         string       `json:"format"`
	Layout         string       `json:"layout"`
	Stats          scheme.Stats `json:"stats"`
	Histogram      Histogram    `json:"histogram"`
	ScaleHistogram Histogram    `json:"scale_histogram"`
	Bytes          int64        `json:"bytes_fetched"` // the whole session's traffic so far
	// SampleBytes and SampleRequests are what this sample alone cost (body
	// bytes and HTTP requests; 0 when its bytes were already cached).
	SampleBytes    int64 `json:"sample_bytes"`
	SampleRequests int64 `json:"sample_requests"`
	// ScaleNote says why the scale plot is empty or partial: no scales
	// (a dense weight), or scales that are 0 or not finite (no log2).
	ScaleNote string `json:"scale_note,omitempty"`
}

// Sample decodes rows [rowStart, rowStart+rows) of a module (or of the module
// holding a tensor of that name).
func (s *Session) Sample(name string, rowStart, rows int) (*SampleView, error) {
	return s.SampleWindow(name, rowStart, rows, 0)
}

// SampleWindow is Sample from input column colStart: GPTQ and AWQ decode
// the SampleWindow columns from there; other layouts decode whole rows.
func (s *Session) SampleWindow(name string, rowStart, rows, colStart int) (*SampleView, error) {
	m, ok := s.ck.Module(name)
	if !ok {
		return nil, fmt.Errorf("no module or tensor %q", name)
	}
	total, cols := m.Matrix2D()
	rows = min(rows, MaxSampleRows, max(1, MaxSampleValues/int(max(cols, 1))))
	if rowStart < 0 || uint64(rowStart) >= total || rows < 1 {
		return nil, fmt.Errorf("module %q: rows %d:%d outside 0:%d", m.Name, rowStart, rowStart+rows, total)
	}
	hi := min(uint64(rowStart+rows), total)
	c0, c1 := 0, int(cols)
	if m.PackedInputs() {
		if colStart < 0 || uint64(colStart) >= cols {
			return nil, fmt.Errorf("module %q: column %d outside 0:%d", m.Name, colStart, cols)
		}
		c0, c1 = colStart, min(c1, colStart+SampleWindow)
	}
	var before hub.Stats
	st, counted := s.src.(hub.StatsSource)
	if counted {
		before = st.Stats()
	}
	smp, err := scheme.SampleRows(m, s.ck, rowStart, int(hi), c0, c1)
	if err != nil {
		return nil, err
	}
	v := &SampleView{Sample: smp, Format: m.Format, Layout: m.Layout}
	v.Stats = scheme.ValueStats(smp.Values)
	v.Histogram = histogram(smp.Values, v.Stats, 48)
	v.ScaleHistogram, v.ScaleNote = scaleHistogram(m, smp.Scales)
	if counted {
		after := st.Stats()
		v.Bytes = after.Bytes
		v.SampleBytes, v.SampleRequests = after.Bytes-before.Bytes, after.Requests-before.Requests
	}
	return v, nil
}

// scaleHistogram is the log2 histogram of the scales, with a note when it
// is empty or leaves some out; an empty one has no counts (and no made-up
// axis).
func scaleHistogram(m *scheme.Module, scales []float32) (Histogram, string) {
	if len(scales) == 0 {
		if m.Format == scheme.FormatNone || !m.Quantized {
			return Histogram{Log2: true}, "stored unquantized (" + m.Format + "): no scales"
		}
		return Histogram{Log2: true}, "this layout stores no scales"
	}
	bad := 0
	for _, x := range scales {
		if x == 0 || x != x || math.IsInf(float64(x), 0) {
			bad++
		}
	}
	if bad == len(scales) {
		return Histogram{Log2: true}, fmt.Sprintf("all %d scales of these rows are 0 or not finite: nothing to draw on a log2 axis", len(scales))
	}
	note := ""
	if bad > 0 {
		note = fmt.Sprintf("%d of %d scales are 0 or not finite, left out of the log2 axis", bad, len(scales))
	}
	return log2Histogram(scales, 32), note
}

// Close releases the session's readers.
func (s *Session) Close() error { return s.ck.Close() }

func histogram(v []float32, st scheme.Stats, bins int) Histogram {
	h := Histogram{Lo: st.Min, Hi: st.Max, Counts: make([]int, bins)}
	if st.NaN+st.Inf == len(v) { // nothing finite to bin
		h.Lo, h.Hi = 0, 1
	} else if st.Max <= st.Min {
		// One value: a bin around it that float64 can tell from it (Lo + 1
		// is Lo itself once |Lo| ≥ 2^53).
		h.Hi = h.Lo + max(1, math.Abs(h.Lo)*0x1p-20)
	}
	w := (h.Hi - h.Lo) / float64(bins)
	for _, x := range v {
		f := float64(x)
		if f != f || math.IsInf(f, 0) {
			continue
		}
		k := (f - h.Lo) / w // clamped as a float: int() of a NaN or ±Inf is no index
		if !(k >= 0) {
			k = 0
		}
		h.Counts[int(min(k, float64(bins-1)))]++
	}
	return h
}

// log2Histogram bins scale magnitudes on a log2 axis, where block scales live.
func log2Histogram(v []float32, bins int) Histogram {
	logs := make([]float32, 0, len(v))
	for _, x := range v {
		if x != 0 && x == x && !math.IsInf(float64(x), 0) {
			logs = append(logs, float32(math.Log2(math.Abs(float64(x)))))
		}
	}
	h := histogram(logs, scheme.ValueStats(logs), bins)
	h.Log2 = true
	return h
}
