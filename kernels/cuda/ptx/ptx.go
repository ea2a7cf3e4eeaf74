// Package ptx holds the CUDA kernels' sources (*.cu) and the PTX that
// `make ptx` generates from them with nvcc 11.8 (`nvcc -ptx
// -arch=compute_80`, PTX ISA 7.8, which drivers ≥ 520 JIT for Ampere, Hopper
// and Blackwell). The PTX is committed: building the worker needs no nvcc.
// Each .ptx starts with a line recording its source's SHA-256, which a test
// checks, so that a .cu changed without `make ptx` fails CI.
package ptx

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.ptx
var files embed.FS

// Modules are the kernels' modules, by name.
var Modules = []string{"dequant", "nvfp4_quant", "w4a_fp8",
	"fp8_quant", "nvfp4_recipes",
	"dequant_int",
}

// SourceLine prefixes the .ptx line that records its .cu's SHA-256.
const SourceLine = "// quantscope-source-sha256: "

// Load returns module name's PTX, NUL-terminated as cuModuleLoadData wants.
func Load(name string) (string, error) {
	b, err := files.ReadFile(name + ".ptx")
	if err != nil {
		return "", fmt.Errorf("ptx: no module %q (make ptx generates it)", name)
	}
	s := string(b)
	if !strings.HasSuffix(s, "\x00") {
		s += "\x00"
	}
	return s, nil
}
