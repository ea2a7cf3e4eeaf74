package scheme

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Keys of a lone .safetensors file's __metadata__ that say what it holds, as
// `quantscope quantize` writes them. A file on its own has no config.json, so
// these stand in for it.
const (
	MetaFormat = "quantscope.format" // nvfp4 | fp8_e4m3 | fp8_e5m2
	MetaNaming = "quantscope.naming" // modelopt | compressed-tensors | gptqmodel
	MetaRecipe = "quantscope.recipe" // the block-scale recipe or FP8 scale granularity
	MetaSource = "quantscope.source" // where the weight came from (SOURCE MODULE)
	MetaCommit = "quantscope.commit" // the commit SOURCE's revision named when it was read (absent for a folder)
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
			return bad(MetaNaming, fmt.Sprintf("NVFP4 naming %s is not modelopt or compressed-tensors", quoteValue(naming)))
		}
	case strings.HasPrefix(f, "fp8_"):
		s.Family = FamilyFP8
		if s.FP8Format = normalizeFP8(strings.TrimPrefix(f, "fp8_")); s.FP8Format == "" {
			return bad(MetaFormat, fmt.Sprintf("unknown FP8 format %s", quoteValue(f)))
		}
		switch naming {
		case NamingModelOpt:
			s.Method, s.QuantAlgo = "modelopt", "FP8"
		case NamingCT:
			s.Method, s.Format = "compressed-tensors", "float-quantized"
		case NamingGPTQM:
			s.Method = "fp8"
		default:
			return bad(MetaNaming, fmt.Sprintf("FP8 naming %s is not modelopt, compressed-tensors or gptqmodel", quoteValue(naming)))
		}
		switch sc := md[MetaScale]; sc {
		case "inverse":
			// GPT-QModel's weight_scale_inv that divides: no other naming has it.
			if naming != NamingGPTQM {
				return bad(MetaScale, fmt.Sprintf("FP8 scale %q is GPT-QModel's weight_scale_inv, naming %q is not gptqmodel", sc, naming))
			}
			s.InverseFP8Scales = true
			s.fileScale = sc
		case "multiplier", "direct":
			s.fileScale = sc
		default:
			return bad(MetaScale, fmt.Sprintf("FP8 scale %s is not inverse, multiplier or direct", quoteValue(sc)))
		}
		if b, has := md[MetaBlock]; has {
			r, c, okRC := strings.Cut(b, ",")
			br, e1 := strconv.Atoi(r)
			bc, e2 := strconv.Atoi(c)
			if !okRC || e1 != nil || e2 != nil || br <= 0 || bc <= 0 {
				return bad(MetaBlock, fmt.Sprintf("block %s is not two positive integers R,C", quoteValue(b)))
			}
			if br > maxBlock || bc > maxBlock {
				return bad(MetaBlock, fmt.Sprintf("block %s is larger than 2^31", quoteValue(b)))
			}
			s.WeightBlockSize = []int{br, bc}
		}
	default:
		return bad(MetaFormat, fmt.Sprintf("format %s is not nvfp4, fp8_e4m3 or fp8_e5m2", quoteValue(f)))
	}
	if s.Method == "compressed-tensors" && s.Family == FamilyFP8 {
		strategy := map[string]string{"tensor": "tensor", "row": "channel", "block": "block"}[md[MetaRecipe]]
		s.Groups = []ConfigGroup{{Name: "group_0", Targets: []string{"Linear"}, Format: s.Format,
			Weights: &QuantArgs{NumBits: 8, Type: "float", Symmetric: true, Strategy: strategy, BlockStructure: s.WeightBlockSize}}}
	}
	return s, true, nil
}

// maxBlock bounds a block dimension read from metadata or a config: no
// weight has 2^31 rows, and a larger one overflows the scale grid's ceiling.
const maxBlock = 1 << 31

// quoteValue quotes at most 64 bytes of a metadata value (cut at a rune
// boundary), marking a cut with "…": a crafted value can be megabytes long.
func quoteValue(v string) string {
	const limit = 64
	if len(v) <= limit {
		return strconv.Quote(v)
	}
	n := limit
	for n > limit-utf8.UTFMax && !utf8.RuneStart(v[n]) {
		n--
	}
	return strconv.Quote(v[:n]) + "…"
}

// scaleKindMismatch says why a lone file's quantscope.scale does not describe
// the FP8 scale tensor the module stores (role), or "" when it does: inverse
// and multiplier are a weight_scale_inv, direct a weight_scale.
func scaleKindMismatch(fileScale, role string) string {
	want := "weight_scale_inv"
	if fileScale == "direct" {
		want = "weight_scale"
	}
	if fileScale == "" || role == want {
		return ""
	}
	return fmt.Sprintf("__metadata__ %s %q describes a %s tensor, the module stores %s", MetaScale, fileScale, want, role)
}
