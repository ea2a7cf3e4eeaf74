// Package kernels is the compute layer of the companion: operations on
// float32 matrices (and on the packed bytes of quantized modules) behind one
// Backend interface, with a CPU backend (kernels/cpu) that is the reference
// for every other (the CUDA worker of a later issue).
//
// It knows nothing of files, repos or jobs: callers hand it matrices or byte
// chunks and a context; kernels check ctx.Err() between chunks and report
// progress through a non-blocking callback.
package kernels

// Matrix is a row-major float32 matrix of Rows × Cols values.
type Matrix struct {
	Rows, Cols int
	Data       []float32
}

// Progress reports work done out of total (units chosen by the operation:
// rows, blocks, bytes). It must not block.
type Progress func(done, total int64)

// Backend is one place kernels run: the CPU (every core) or a GPU worker.
// Its operations are declared by the interfaces it embeds, each in the file
// of its operation family.
type Backend interface {
	// Name says where the work runs ("cpu (16 cores)", "cuda: NVIDIA H200").
	Name() string
	Dequantizer
	Quantizer
	W4A
}
