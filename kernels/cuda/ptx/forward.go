package ptx

// The forward-pass and calibration modules (issue 10 §1, the forward
// kernels): the W4A-NVFP4 GEMM, the Llama layer's other ops and the
// calibration reductions. Registered here, not in Modules' literal, so that
// the lists other kernel families add to do not collide.
func init() {
	Modules = append(Modules, "w4a_nvfp4", "llama", "calib", "w4a_fp8_tc", "w4a_nvfp4_tc")
}
