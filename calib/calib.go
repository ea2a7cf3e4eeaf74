// Package calib runs the calibration passes over a Llama decoder (model/):
// weight_max, act_max (GPT-QModel's producer_maximum), percentile, headroom,
// awq_lite and local_hessian. Each pass reads token-id sequences (one per
// line, the format eval reads), streams the decoder layer by layer, reports
// progress, and returns a report whose JSON a page or a terminal shows and
// whose act_max form forward/eval take back with --scales.
package calib

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/internal/userfile"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

// Data is a calibration file: its sequences and what names it, so that the
// evaluation can refuse the same file.
type Data struct {
	Path   string
	SHA256 string
	Seqs   [][]int
	Tokens int
}

// MaxDataFile bounds a token-id data file (a calibration or evaluation set
// of a few million tokens is tens of MB).
const MaxDataFile = 256 << 20

// ReadData reads FILE's non-empty lines as token id sequences (ids
// separated by whitespace or commas) and hashes its bytes.
func ReadData(path string) (*Data, error) {
	b, err := userfile.Read(path, MaxDataFile)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	sum := sha256.Sum256(b)
	d := &Data{Path: path, SHA256: hex.EncodeToString(sum[:])}
	for i, line := range strings.Split(string(b), "\n") {
		ids, err := ParseIDs(line)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, i+1, err)
		}
		if len(ids) > 0 {
			d.Seqs = append(d.Seqs, ids)
			d.Tokens += len(ids)
		}
	}
	if len(d.Seqs) == 0 {
		return nil, fmt.Errorf("%s: no token id sequence", path)
	}
	return d, nil
}

// FileData identifies a data file that is not token ids (a text file for
// eval --text) by its path and sha256, for CheckOverlap.
func FileData(path string, b []byte) *Data {
	sum := sha256.Sum256(b)
	return &Data{Path: path, SHA256: hex.EncodeToString(sum[:])}
}

// ParseIDs reads token ids separated by whitespace or commas. A field that
// is not one is named by its place, not quoted: the file may be any file a
// client of the companion names, and its content is not theirs to read.
func ParseIDs(text string) ([]int, error) {
	if loc := emptyIDField.FindStringIndex(text); loc != nil {
		return nil, fmt.Errorf("an empty field between commas at byte %d (ids are separated by one comma or by whitespace)", loc[0])
	}
	var ids []int
	for i, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
		id, err := strconv.Atoi(f)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("field %d is not a token id (a non-negative integer)", i+1)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// emptyIDField is a comma with no id before or after it: "1,,2", ",1", "1,".
var emptyIDField = regexp.MustCompile(`^\s*,|,\s*,|,\s*$`)

// Options are what every pass may use.
type Options struct {
	W4A string // the forward's W4A mode while data flows (model.W4A*)
	// Attention is act_max's attention policy: "" (NVFP4, as the MLP) or
	// model.W4AFP8 (the mixed policy, whose attention carriers take dynamic
	// FP8 scales and so are not calibrated).
	Attention string
	Recipe    string // the NVFP4 activation recipe (default least_squares)
	// Progress is told done out of total (units each pass names).
	Progress kernels.Progress
}

func (o Options) progress(done, total int) {
	if o.Progress != nil {
		o.Progress(int64(done), int64(total))
	}
}

func (o Options) recipe() string {
	if o.Recipe == "" {
		return kernels.ActLeastSquares
	}
	return o.Recipe
}

// carriers embeds every sample: the residual streams entering layer 0.
func carriers(m *model.Model, d *Data) ([]kernels.Matrix, error) {
	hs := make([]kernels.Matrix, len(d.Seqs))
	for i, s := range d.Seqs {
		h, err := m.Embed(s)
		if err != nil {
			return nil, fmt.Errorf("%s: sequence %d: %w", d.Path, i+1, err)
		}
		hs[i] = h
	}
	return hs, nil
}

func clone(x kernels.Matrix) kernels.Matrix {
	return kernels.Matrix{Rows: x.Rows, Cols: x.Cols, Data: append([]float32(nil), x.Data...)}
}

func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if v < 0 {
			v = -v
		}
		m = max(m, v)
	}
	return m
}

// observeAll runs every sample through the whole decoder under opt and
// calls fn for every producer value (the forward's own order), layer by
// layer so only one layer's weights are held at a time.
func observeAll(ctx context.Context, m *model.Model, d *Data, o Options, fn func(producer string, x kernels.Matrix), extra model.Options) error {
	hs, err := carriers(m, d)
	if err != nil {
		return err
	}
	L := m.Config.Layers
	opt := extra
	opt.W4A, opt.Recipe = o.W4A, o.Recipe
	opt.Observe = func(p string, x kernels.Matrix) error {
		if err := finite(p, x); err != nil {
			return err
		}
		fn(p, x)
		return nil
	}
	for l := range L {
		opt.Weights = model.NewWeightCache()
		for i := range hs {
			if err := m.RunLayer(ctx, l, hs[i], opt); err != nil {
				return fmt.Errorf("layer %d, sequence %d: %w", l, i+1, err)
			}
		}
		o.progress(l+1, L)
	}
	return nil
}

// finite refuses a producer's values that hold a NaN or an infinity (a
// weight, or the data, made the forward overflow): every pass's statistics
// of them would be meaningless, a percentile's bin index among them.
func finite(producer string, x kernels.Matrix) error {
	for i, v := range x.Data {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			cols := max(x.Cols, 1)
			return fmt.Errorf("producer %s: rule finite-activations: token %d, channel %d is %v", producer, i/cols, i%cols, v)
		}
	}
	return nil
}
