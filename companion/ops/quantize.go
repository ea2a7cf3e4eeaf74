package ops

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/internal/userfile"
	"github.com/quantscope/quantscope/kernels"
)

func init() {
	Register("quantize", quantizeOp)
}

// QuantizeParams are the "quantize" op's parameters, named as the command
// line's options.
type QuantizeParams struct {
	Format string `json:"format"` // nvfp4 | fp8_e4m3 | fp8_e5m2
	Recipe string `json:"recipe"` // nvfp4: max (default) | mse | four_six | least_squares | local_hessian
	Scale  string `json:"scale"`  // fp8: tensor | row (default) | block
	Block  string `json:"block"`  // fp8 block: "R,C"
	Naming string `json:"naming"` // modelopt | compressed-tensors | gptqmodel
	Data   string `json:"data"`   // local_hessian: little-endian float32 [tokens, in] activations
	Out    string `json:"out"`    // the file name (default MODULE.FORMAT.safetensors)
	// Path, when set, writes the file at this relative path under the
	// companion's output folder (Env.WriteDir, `serve --out-dir DIR`) instead
	// of returning its bytes; refused when there is no such folder, and for
	// any path that is absolute, climbs out with "..", or leaves the folder
	// through a symbolic link.
	Path string `json:"path"`
}

// normalize fills the contract's defaults and refuses combinations the
// namings cannot hold.
func (p *QuantizeParams) normalize() error {
	switch p.Format {
	case "nvfp4":
		if p.Recipe == "" {
			p.Recipe = kernels.RecipeMax
		}
		if p.Naming == "" {
			p.Naming = scheme.NamingModelOpt
		}
		if p.Naming != scheme.NamingModelOpt && p.Naming != scheme.NamingCT {
			return fmt.Errorf("quantize: rule quantize-naming: NVFP4 is written in modelopt or compressed-tensors naming, not %q", p.Naming)
		}
		if p.Scale != "" || p.Block != "" {
			return fmt.Errorf("quantize: rule quantize-options: --scale and --block are FP8 options; NVFP4 has 16-value block scales")
		}
	case "fp8_e4m3", "fp8_e5m2":
		switch {
		case p.Scale == "" && p.Block != "":
			p.Scale = kernels.ScaleBlock
		case p.Scale == "":
			p.Scale = kernels.ScaleRow
		case p.Block != "" && p.Scale != kernels.ScaleBlock:
			return fmt.Errorf("quantize: rule quantize-options: --block goes with --scale block, not --scale %s", p.Scale)
		}
		if p.Naming == "" {
			p.Naming = scheme.NamingGPTQM
		}
		if p.Naming != scheme.NamingGPTQM && p.Naming != scheme.NamingModelOpt && p.Naming != scheme.NamingCT {
			return fmt.Errorf("quantize: rule quantize-naming: unknown naming %q (want modelopt, compressed-tensors or gptqmodel)", p.Naming)
		}
		if p.Recipe != "" && p.Recipe != kernels.RecipeMax {
			return fmt.Errorf("quantize: rule quantize-options: FP8 scales are amax scales; recipe %q is an NVFP4 recipe", p.Recipe)
		}
	case "":
		return fmt.Errorf("quantize: rule quantize-options: --format is required (nvfp4, fp8_e4m3 or fp8_e5m2)")
	default:
		return fmt.Errorf("quantize: rule quantize-options: unknown format %q (want nvfp4, fp8_e4m3 or fp8_e5m2)", p.Format)
	}
	if n := len(filepath.Base(p.Out)); n > maxFileName {
		return fmt.Errorf("quantize: rule quantize-options: out: a file name of %d bytes; at most %d", n, maxFileName)
	}
	return nil
}

// maxFileName bounds the name of a written file: it travels as the name of
// a binary frame ("file:" + name, proto.MaxNameLen = 1024 bytes).
const maxFileName = 1000

// outName is the file's name: out, else MODULE.FORMAT.safetensors.
func outName(out, module, format string) string {
	if out != "" {
		return filepath.Base(out)
	}
	return fitName(module, "."+format+".safetensors")
}

// fitName is stem + suffix with the stem cut to fit maxFileName (a repo's
// tensor and module names have no length limit), its last path element.
func fitName(stem, suffix string) string {
	if len(stem)+len(suffix) > maxFileName {
		stem = strings.ToValidUTF8(stem[:maxFileName-len(suffix)], "")
	}
	return filepath.Base(stem + suffix)
}

func (p *QuantizeParams) block() ([2]int, error) {
	if p.Scale != kernels.ScaleBlock {
		return [2]int{}, nil
	}
	if p.Block == "" {
		return [2]int{128, 128}, nil // GPT-QModel's and DeepSeek's usual block
	}
	r, c, ok := strings.Cut(p.Block, ",")
	br, e1 := strconv.Atoi(strings.TrimSpace(r))
	bc, e2 := strconv.Atoi(strings.TrimSpace(c))
	if !ok || e1 != nil || e2 != nil || br <= 0 || bc <= 0 {
		return [2]int{}, fmt.Errorf("quantize: rule fp8-block: --block %q is not two positive integers R,C", p.Block)
	}
	return [2]int{br, bc}, nil
}

// moduleWeight reads a module's logical weight as a float32 [out, in]
// matrix (dequantized from whatever format it is stored in) through the
// backend's streamed decode: on every core, cancelled between bands (so a
// cancel does not wait for the read), and reported to progress as the
// first fifth of the operation (a read decodes at memory speed; the kernels
// after it do more work a value). It returns the progress to hand the
// kernel (its own done/total, mapped onto the other four fifths).
func moduleWeight(ctx context.Context, env Env, module string) (*scheme.Module, kernels.Matrix, kernels.Progress, error) {
	c := env.Checkpoint
	m, err := FindModule(c, module)
	if err != nil {
		return nil, kernels.Matrix{}, nil, err
	}
	module = m.Name
	if len(m.WeightShape) != 2 {
		what := "not a 2-D [out, in] matrix"
		if len(m.WeightShape) == 3 {
			what = fmt.Sprintf("%d experts stacked in one tensor, not one 2-D [out, in] linear: quantize and report take one linear at a time", m.WeightShape[0])
		}
		return nil, kernels.Matrix{}, nil, fmt.Errorf("module %q: rule quantize-shape: weight shape %v is %s", module, m.WeightShape, what)
	}
	src, err := ModuleSource(m, c)
	if err != nil {
		return nil, kernels.Matrix{}, nil, err
	}
	rows, cols := src.Shape()
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	var read, rest kernels.Progress
	if p := env.Progress; p != nil {
		read = func(done, total int64) { p(done, 5*total) }
		rest = func(done, total int64) { p(total+4*done, 5*total) }
	}
	err = env.Backend.Dequantize(ctx, src, kernels.DequantOptions{Progress: read}, func(b *kernels.Band) error {
		copy(w.Data[b.Lo*cols:b.Hi*cols], b.Values)
		return nil
	})
	if err != nil {
		return nil, kernels.Matrix{}, nil, err
	}
	return m, w, rest, nil
}

// maxActivationsFile bounds an activations file (2,048 tokens of an
// 18,432-wide input are 151 MB).
const maxActivationsFile = 1 << 30

// ReadActivations reads a little-endian float32 file of [tokens, in] values
// for module. When calibrate's note beside it (FILE.json, calib.InputsMeta)
// names another module, or another width, the file is refused: inputs of
// one projection are no calibration of another, even when its width
// divides their size.
func ReadActivations(path, module string, in int) (*kernels.Matrix, error) {
	if in <= 0 {
		return nil, fmt.Errorf("%s: rule local-hessian-data: the weight has %d input columns, so no activations fit it", path, in)
	}
	b, err := userfile.Read(path, maxActivationsFile)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	if mb, err := userfile.Read(path+".json", 1<<16); err == nil {
		var meta calib.InputsMeta
		if err := json.Unmarshal(mb, &meta); err != nil {
			return nil, fmt.Errorf("%s.json: rule local-hessian-data: not calibrate's note of the activations: %v", path, err)
		}
		if 4*meta.Tokens*meta.In != len(b) {
			meta = calib.InputsMeta{} // a note of another file (rewritten since by something else): it says nothing of this one
		}
		if meta.Module != "" && module != "" && meta.Module != module {
			return nil, fmt.Errorf("%s: rule local-hessian-data: the inputs of module %q (%s.json), not of %q: calibrate --module %s --out FILE writes %s's",
				path, meta.Module, path, module, module, module)
		}
		if meta.In != 0 && meta.In != in {
			return nil, fmt.Errorf("%s: rule local-hessian-data: %d-wide inputs (%s.json); the weight takes %d", path, meta.In, path, in)
		}
	}
	if len(b)%4 != 0 || len(b) == 0 || (len(b)/4)%in != 0 {
		return nil, fmt.Errorf("%s: rule local-hessian-data: %d bytes are not little-endian float32 [tokens, %d] activations", path, len(b), in)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return &kernels.Matrix{Rows: len(v) / in, Cols: in, Data: v}, nil
}

func quantizeOp(ctx context.Context, env Env, module string, raw json.RawMessage) (*Result, error) {
	var p QuantizeParams
	if err := DecodeParams("quantize", raw, &p); err != nil {
		return nil, err
	}
	if err := p.normalize(); err != nil {
		return nil, err
	}
	blk, err := p.block()
	if err != nil {
		return nil, err
	}
	if p.Recipe == kernels.RecipeLocalHessian && p.Data == "" {
		return nil, fmt.Errorf("quantize: rule local-hessian-data: recipe local_hessian needs calibration activations (--data FILE: little-endian float32 [tokens, in])")
	}
	m, w, progress, err := moduleWeight(ctx, env, module)
	if err != nil {
		return nil, err
	}
	module = m.Name // the name given may be its weight tensor's
	md := map[string]string{
		scheme.MetaFormat: p.Format,
		scheme.MetaNaming: p.Naming,
		scheme.MetaSource: env.Checkpoint.Source.Name() + " " + module,
	}
	if cs, ok := env.Checkpoint.Source.(hub.CommitSource); ok && cs.ResolvedCommit() != "" {
		md[scheme.MetaCommit] = cs.ResolvedCommit()
	}
	var tensors []safetensors.WriteTensor
	shape := []uint64{uint64(w.Rows), uint64(w.Cols)}
	divides := "f32" // the dtype w / scale is rounded to before the FP8 or E2M1 cast
	if p.Format == "nvfp4" {
		opt := kernels.NVFP4Options{Recipe: p.Recipe}
		if p.Data != "" {
			path, err := env.Reads.Path("quantize", "data", p.Data)
			if err != nil {
				return nil, err
			}
			if opt.Activations, err = ReadActivations(path, m.Name, w.Cols); err != nil {
				return nil, err
			}
		}
		r, err := env.Backend.QuantizeNVFP4(ctx, w, opt, progress)
		if err != nil {
			return nil, fmt.Errorf("module %q: %w", module, err)
		}
		md[scheme.MetaRecipe] = p.Recipe
		tensors = nvfp4Tensors(module, p.Naming, r)
	} else {
		fmt8 := strings.TrimPrefix(p.Format, "fp8_")
		opt := kernels.FP8Options{Format: fmt8, Scale: p.Scale, Block: blk, Inverse: p.Naming == scheme.NamingGPTQM}
		inverse := opt.Inverse
		// A 16-bit weight keeps its dtype through a direct division: by
		// ModelOpt's 0-dim per-tensor scale, and by compressed-tensors'
		// scale, which its observer computes in that dtype.
		if half := halfDType(m); half != "" && !inverse {
			switch {
			case p.Naming == scheme.NamingCT:
				opt.Half, opt.HalfScale = half, true
			case p.Naming == scheme.NamingModelOpt && p.Scale == kernels.ScaleTensor:
				opt.Half = half
			}
		}
		r, err := env.Backend.QuantizeFP8(ctx, w, opt, progress)
		if err != nil {
			return nil, fmt.Errorf("module %q: %w", module, err)
		}
		if opt.Half != "" {
			divides = opt.Half
		}
		md[scheme.MetaRecipe] = p.Scale
		md[scheme.MetaScale] = "direct"
		if inverse {
			md[scheme.MetaScale] = "inverse"
		}
		if p.Scale == kernels.ScaleBlock {
			md[scheme.MetaBlock] = fmt.Sprintf("%d,%d", blk[0], blk[1])
		}
		tensors = fp8Tensors(module, p.Naming, fmt8, shape, r, opt)
	}
	if bias, ok := m.Info("bias"); ok {
		b, err := env.Checkpoint.ReadTensor(bias.Name, 0, int64(bias.NBytes))
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, safetensors.WriteTensor{Name: module + ".bias", DType: bias.DType, Shape: bias.Shape, Data: b})
	}
	data, err := safetensors.Encode(tensors, md)
	if err != nil {
		return nil, err
	}
	file := File{Name: outName(p.Out, module, p.Format)}
	if p.Path != "" {
		if file.Path, err = writeUnder("quantize", env.WriteDir, p.Path, data); err != nil {
			return nil, err
		}
		file.Name = filepath.Base(file.Path)
	} else {
		file.Data = data
	}
	names := make([]string, len(tensors))
	for i, t := range tensors {
		names[i] = t.Name
	}
	return &Result{
		JSON: map[string]any{
			"module": module, "shape": []int{w.Rows, w.Cols}, "format": p.Format, "recipe": md[scheme.MetaRecipe],
			"naming": p.Naming, "tensors": names, "file": file.Name, "bytes": len(data), "divides_in": divides,
		},
		Files: []File{file},
	}, nil
}

// writeUnder writes data at the relative path rel inside dir, confined to
// dir by os.Root (no absolute paths, no "..", no symbolic link out of it),
// and returns the path written.
func writeUnder(op, dir, rel string, data []byte) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%s: rule %s-path: this companion writes no files (start it with `quantscope serve --out-dir DIR` to allow paths under DIR); %q was not written", op, op, rel)
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s: rule %s-path: %q is not a relative path inside the companion's output folder %s", op, op, rel, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("%s: the output folder: %w", op, err)
	}
	defer root.Close()
	// say what is wrong with the path in the user's words, not openat's
	switch fi, err := root.Stat(filepath.Dir(rel)); {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s: rule %s-path: %q: its folder %s does not exist under the companion's output folder %s", op, op, rel, filepath.Dir(rel), dir)
	case err != nil: // a link out of the folder, among others
		return "", fmt.Errorf("%s: rule %s-path: %q: its folder %s under %s cannot be used: %w", op, op, rel, filepath.Dir(rel), dir, userfile.Cause(err))
	case !fi.IsDir():
		return "", fmt.Errorf("%s: rule %s-path: %q: %s under %s is a file, not a folder", op, op, rel, filepath.Dir(rel), dir)
	}
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s: rule %s-path: %q is a folder under %s; give a file's name", op, op, rel, dir)
	}
	if err := root.WriteFile(rel, data, 0o644); err != nil {
		return "", fmt.Errorf("%s: rule %s-path: writing %q under %s: %w", op, op, rel, dir, userfile.Cause(err))
	}
	return filepath.Join(dir, rel), nil
}

// renameUnder renames from to rel inside dir (both inside it), and says
// where rel is.
func renameUnder(op, dir, from, rel string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("%s: the output folder: %w", op, err)
	}
	defer root.Close()
	if err := root.Rename(from, rel); err != nil {
		return "", fmt.Errorf("%s: rule %s-path: %q under %s: %w", op, op, rel, dir, userfile.Cause(err))
	}
	return filepath.Join(dir, rel), nil
}

// removeUnder removes rel inside dir, if it is there.
func removeUnder(dir, rel string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// nvfp4Tensors lays out an NVFP4 result in DESIGN.md's naming.
func nvfp4Tensors(module, naming string, r *kernels.NVFP4Result) []safetensors.WriteTensor {
	rows, cols := uint64(r.Rows), uint64(r.Cols)
	if naming == scheme.NamingCT {
		return []safetensors.WriteTensor{
			{Name: module + ".weight_packed", DType: safetensors.U8, Shape: []uint64{rows, cols / 2}, Data: r.Packed},
			{Name: module + ".weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{rows, cols / 16}, Data: r.Scales},
			{Name: module + ".weight_global_scale", DType: safetensors.F32, Shape: []uint64{1}, Data: f32Bytes([]float32{1 / r.Scale2})},
		}
	}
	return []safetensors.WriteTensor{
		{Name: module + ".weight", DType: safetensors.U8, Shape: []uint64{rows, cols / 2}, Data: r.Packed},
		{Name: module + ".weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{rows, cols / 16}, Data: r.Scales},
		{Name: module + ".weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, Data: f32Bytes([]float32{r.Scale2})},
	}
}

// halfDType is the 16-bit dtype of a module stored as BF16 or F16 (the
// dtype its producer would hold the weight in), "" otherwise: a quantized
// module's dequantized values are float32.
func halfDType(m *scheme.Module) string {
	if m.Quantized {
		return ""
	}
	if t, ok := m.Info("weight"); ok {
		switch t.DType {
		case safetensors.BF16:
			return kernels.HalfBF16
		case safetensors.F16:
			return kernels.HalfF16
		}
	}
	return ""
}

// fp8Tensors lays out an FP8 result: GPT-QModel's weight_scale_inv, or the
// direct weight_scale of ModelOpt (a 0-dim tensor scale, an [out] row
// scale) and of compressed-tensors (in the weight's dtype when its
// observer computed it so, the tensor scale [1], the channel scale
// [out, 1]).
func fp8Tensors(module, naming, format string, shape []uint64, r *kernels.FP8Result, opt kernels.FP8Options) []safetensors.WriteTensor {
	dt := safetensors.F8_E4M3
	if format == kernels.FP8E5M2 {
		dt = safetensors.F8_E5M2
	}
	sshape := make([]uint64, len(r.ScaleShape))
	for i, d := range r.ScaleShape {
		sshape[i] = uint64(d)
	}
	scaleName, sdt, sdata := module+".weight_scale_inv", safetensors.F32, f32Bytes(r.Scales)
	if naming != scheme.NamingGPTQM {
		scaleName = module + ".weight_scale"
	}
	if naming == scheme.NamingCT {
		switch len(sshape) {
		case 0:
			sshape = []uint64{1}
		case 1:
			sshape = append(sshape, 1)
		}
		if opt.HalfScale {
			sdt, sdata = halfBytes(opt.Half, r.Scales)
		}
	}
	return []safetensors.WriteTensor{
		{Name: module + ".weight", DType: dt, Shape: shape, Data: r.Codes},
		{Name: scaleName, DType: sdt, Shape: sshape, Data: sdata},
	}
}

// halfBytes stores values already rounded to a 16-bit dtype in it.
func halfBytes(half string, v []float32) (safetensors.DType, []byte) {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		h := numeric.Float32ToBF16(x)
		if half == kernels.HalfF16 {
			h = numeric.Float32ToF16(x)
		}
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	if half == kernels.HalfF16 {
		return safetensors.F16, b
	}
	return safetensors.BF16, b
}
