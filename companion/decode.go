package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/scheme"
)

func cmdDecode(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"name","shape","values"} instead of statistics`)
	rowsFlag := fs.String("rows", "", "row slice A:B of the logical [rows, cols] weight (default all rows)")
	out := fs.String("out", "", "write the values as little-endian float32 to FILE")
	var sf sourceFlags
	sf.register(fs, true, true)
	only := indexShardsFlag(fs)
	pos, err := parseFlags(fs, args, 2, "SOURCE NAME")
	if err != nil {
		return err
	}
	// What can be checked without the module is checked before the repo
	// is read: a typo costs no network round trips.
	if _, _, err := parseRows(*rowsFlag, -1); err != nil {
		return err
	}
	if *out != "" {
		if err := checkOut(*out); err != nil {
			return err
		}
	}
	c, err := loadStreaming(ctx, pos[0], sf, only.modules(pos[1])...)
	if err != nil {
		return err
	}
	defer c.Close()
	if m, ok := c.Module(pos[1]); ok && (m.Name == pos[1] || m.Primary() == pos[1]) {
		return decodeModule(ctx, c, m, *rowsFlag, *out, *asJSON, stdout)
	}
	d, err := decodeName(c, pos[1], *rowsFlag)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeFloats(*out, d.values); err != nil {
			return err
		}
	}
	if *asJSON {
		b := appendJSONHead(nil, d.name, d.rows, d.cols)
		b = appendJSONValues(b, d.values, true)
		_, err = stdout.Write(append(b, "]}\n"...))
		return err
	}
	return printValueStats(stdout, d.rows, d.cols, scheme.ValueStats(d.values))
}

func printValueStats(w io.Writer, rows, cols int, st scheme.Stats) error {
	line := fmt.Sprintf("min=%g max=%g mean=%g std=%g", st.Min, st.Max, st.Mean, st.Std)
	if st.NaN+st.Inf > 0 {
		line += fmt.Sprintf(" nan=%d inf=%d", st.NaN, st.Inf)
	}
	_, err := fmt.Fprintf(w, "shape=%d,%d\n%s\n", rows, cols, line)
	return err
}

type decoded struct {
	name       string
	rows, cols int
	values     []float32
}

// decodeName decodes a module (its dequantized weight) or, for a tensor that
// is not a module's weight, the tensor's own values viewed as [rows, last dim].
func decodeName(c *checkpoint.Checkpoint, name, rowSpec string) (*decoded, error) {
	m, ok := c.Module(name)
	if !ok {
		// NAME.weight of a module stored as qweight, weight_packed, blocks…:
		// the module's weight, as stats and quantize read it
		var err error
		if m, err = ops.FindModule(c, name); err != nil {
			return nil, err
		}
		name = m.Name
	}
	if m.Name == name || m.Primary() == name {
		rows, cols := m.Matrix2D()
		lo, hi, err := parseRows(rowSpec, int(rows))
		if err != nil {
			return nil, fmt.Errorf("module %q: %w", m.Name, err)
		}
		v, err := scheme.Dequantize(m, c, lo, hi)
		if err != nil {
			return nil, err
		}
		return &decoded{name: m.Name, rows: hi - lo, cols: int(cols), values: v}, nil
	}
	// A scale, zero point or other tensor: its stored values.
	var info *scheme.TensorInfo
	for role, t := range m.Tensors() {
		if t == name {
			info, _ = m.Info(role)
		}
	}
	if info == nil {
		return nil, fmt.Errorf("%s: no tensor named %q", c.Source.Name(), name)
	}
	cols := 1
	if len(info.Shape) > 0 {
		cols = int(info.Shape[len(info.Shape)-1])
	}
	total := 1
	for _, d := range info.Shape {
		total *= int(d)
	}
	rows := total / max(cols, 1)
	lo, hi, err := parseRows(rowSpec, rows)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	bits := int(info.DType.Bits())
	if (cols*bits)%8 != 0 {
		return nil, fmt.Errorf("tensor %q: rows of %d %s values do not fill whole bytes", name, cols, info.DType)
	}
	rowBytes := int64(cols * bits / 8)
	b, err := c.ReadTensor(name, int64(lo)*rowBytes, int64(hi-lo)*rowBytes)
	if err != nil {
		return nil, err
	}
	v, err := numeric.Decode(info.DType, b)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return &decoded{name: name, rows: hi - lo, cols: cols, values: v}, nil
}

// parseRows reads --rows A:B against a module of rows rows; rows < 0
// checks the spec's form alone (before the module is known).
func parseRows(spec string, rows int) (int, int, error) {
	if spec == "" {
		return 0, rows, nil
	}
	known := rows >= 0
	if !known {
		rows = math.MaxInt
	}
	a, b, ok := strings.Cut(spec, ":")
	if !ok {
		return 0, 0, fmt.Errorf("--rows %q: want A:B", spec)
	}
	lo, hi := 0, rows
	var err error
	notRow := func(v string) error {
		if !known {
			return fmt.Errorf("--rows %q: %q is not a row number (A:B with A and B whole numbers from 0 to the module's rows, either may be left out)", spec, v)
		}
		return fmt.Errorf("--rows %q: %q is not a row number (A:B with A and B whole numbers from 0 to %d, either may be left out)", spec, v, rows)
	}
	if a != "" {
		if lo, err = strconv.Atoi(a); err != nil {
			return 0, 0, notRow(a)
		}
	}
	if b != "" {
		if hi, err = strconv.Atoi(b); err != nil {
			return 0, 0, notRow(b)
		}
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("--rows %q: reversed (A must not be past B: %d:%d?)", spec, hi, lo)
	}
	if !known && lo >= 0 {
		if lo == hi {
			return 0, 0, fmt.Errorf("--rows %q: no rows (A:B is rows A to B-1: %d:%d?)", spec, lo, lo+1)
		}
		return lo, hi, nil // the range is checked once the module's rows are known
	}
	if lo < 0 || hi > rows {
		if !known {
			return 0, 0, fmt.Errorf("--rows %q: rows start at 0", spec)
		}
		return 0, 0, fmt.Errorf("--rows %q: outside 0:%d", spec, rows)
	}
	if lo == hi && rows > 0 {
		return 0, 0, fmt.Errorf("--rows %q: no rows (A:B is rows A to B-1: %d:%d?)", spec, lo, lo+1)
	}
	return lo, hi, nil
}

func writeFloats(path string, v []float32) error {
	return writeOut(path, func(f *os.File) error {
		var buf []byte
		var err error
		for len(v) > 0 {
			n := min(len(v), 1<<18)
			if buf, err = writeLE(f, buf, v[:n]); err != nil {
				return err
			}
			v = v[n:]
		}
		return nil
	})
}
