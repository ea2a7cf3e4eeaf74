package kernels

// Quantizer is the family of FP8 / NVFP4 quantization operations and their
// scale recipes (filled in by the issue that builds them).
type Quantizer interface{}
