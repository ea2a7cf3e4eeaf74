package kernels

// Dequantizer is the family of full-module dequantization and statistics
// operations (filled in by the issue that builds them).
type Dequantizer interface{}
