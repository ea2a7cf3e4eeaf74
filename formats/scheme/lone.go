package scheme

import (
	"fmt"
	"strconv"
	"strings"
)

// Keys of a lone .safetensors file's __metadata__ that say what it holds, as
// `quantscope quantize` writes them. A file on its own has no config.json, so
// these stand in for it.
const (
	MetaFormat = "quantscope.format" // nvfp4 | fp8_e4m3 | fp8_e5m2
	MetaNaming = "quantscope.naming" // modelopt | compressed-tensors | gptqmodel
	MetaRecipe = "quantscope.recipe" // the block-scale recipe or FP8 scale granularity
	MetaSource = "quantscope.source" // where the weight came from (SOURCE MODULE)
	// MetaScale says how an FP8 scale is applied: "inverse" (weight_scale_inv
	// divides: w = q / s, GPT-QModel), "multiplier" (weight_scale_inv
	// multiplies, DeepSeek) or "direct" (weight_scale multiplies).
	MetaScale = "quantscope.scale"
	MetaBlock = "quantscope.block" // "R,C" for FP8 block scales
)

// Namings of a written file.
const (
	NamingModelOpt = "modelopt"
	NamingCT       = "compressed-tensors"
	NamingGPTQM    = "gptqmodel"
)

// FromFileMetadata reads the scheme a lone file's __metadata__ declares. ok
// is false when the metadata says nothing of it (no MetaFormat key).
func FromFileMetadata(md map[string]string) (s *Scheme, ok bool, err error) {
	f, has := md[MetaFormat]
	if !has {
		return nil, false, nil
	}
	bad := func(key, msg string) (*Scheme, bool, error) {
		return nil, true, &ConfigError{File: "__metadata__", Field: key, Msg: msg}
	}
	naming := md[MetaNaming]
	s = &Scheme{Producer: "quantscope", DeclaredIn: []string{"__metadata__"}}
	switch {
	case f == "nvfp4":
		s.Family, s.GroupSize = FamilyNVFP4, 16
		switch naming {
		case NamingModelOpt:
			s.Method, s.QuantAlgo = "modelopt", "NVFP4"
		case NamingCT:
			s.Method, s.Format = "compressed-tensors", "nvfp4-pack-quantized"
			s.Groups = []ConfigGroup{{Name: "group_0", Targets: []string{"Linear"}, Format: s.Format,
				Weights: &QuantArgs{NumBits: 4, Type: "float", Symmetric: true, Strategy: "tensor_group", GroupSize: 16}}}
		default:
			return bad(MetaNaming, fmt.Sprintf("NVFP4 naming %q is not modelopt or compressed-tensors", naming))
		}
	case strings.HasPrefix(f, "fp8_"):
		s.Family = FamilyFP8
		if s.FP8Format = normalizeFP8(strings.TrimPrefix(f, "fp8_")); s.FP8Format == "" {
			return bad(MetaFormat, fmt.Sprintf("unknown FP8 format %q", f))
		}
		switch naming {
		case NamingModelOpt:
			s.Method, s.QuantAlgo = "modelopt", "FP8"
		case NamingCT:
			s.Method, s.Format = "compressed-tensors", "float-quantized"
		case NamingGPTQM:
			s.Method = "fp8"
		default:
			return bad(MetaNaming, fmt.Sprintf("FP8 naming %q is not modelopt, compressed-tensors or gptqmodel", naming))
		}
		switch sc := md[MetaScale]; sc {
		case "inverse":
			s.InverseFP8Scales = true
		case "multiplier", "direct":
		default:
			return bad(MetaScale, fmt.Sprintf("FP8 scale %q is not inverse, multiplier or direct", sc))
		}
		if b, has := md[MetaBlock]; has {
			r, c, okRC := strings.Cut(b, ",")
			br, e1 := strconv.Atoi(r)
			bc, e2 := strconv.Atoi(c)
			if !okRC || e1 != nil || e2 != nil || br <= 0 || bc <= 0 {
				return bad(MetaBlock, fmt.Sprintf("block %q is not two positive integers R,C", b))
			}
			s.WeightBlockSize = []int{br, bc}
		}
	default:
		return bad(MetaFormat, fmt.Sprintf("format %q is not nvfp4, fp8_e4m3 or fp8_e5m2", f))
	}
	if s.Method == "compressed-tensors" && s.Family == FamilyFP8 {
		strategy := map[string]string{"tensor": "tensor", "row": "channel", "block": "block"}[md[MetaRecipe]]
		s.Groups = []ConfigGroup{{Name: "group_0", Targets: []string{"Linear"}, Format: s.Format,
			Weights: &QuantArgs{NumBits: 8, Type: "float", Symmetric: true, Strategy: strategy, BlockStructure: s.WeightBlockSize}}}
	}
	return s, true, nil
}
