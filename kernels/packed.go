package kernels

// PackedSource is a RowSource that can also hand over its weight as
// stored, for a backend that decodes on its own device (the CUDA worker's
// statistics). Packed returns nil and no error when the source's layout has
// no packed form; the backend then decodes bands as usual.
type PackedSource interface {
	RowSource
	Packed() (*Packed, error)
}

// Packed is a weight in its stored form with its small tensors decoded,
// field for field formats/scheme's Packed (see there for each field): a
// module's every value and band information can be computed from it.
type Packed struct {
	Kind          string // "int", "nvfp4", "mxfp4" or "fp8"
	Rows, Cols    int
	Data          []byte
	ScaleCodes    []byte
	Global        float32
	Scales        []float32
	IntLayout     string // "ct-bitstream", "ct-per-word", "gptq" or "awq"
	Bits          int
	Zeros         []float32
	GIdx          []int32
	R, C          int
	E5M2, Inverse bool
}
