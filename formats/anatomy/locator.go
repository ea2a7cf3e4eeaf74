package anatomy

import (
	"strconv"
	"strings"
)

// Locator is Locate over many modules of one model: modules whose names
// differ only in the numbers after their layer's (the expert indices of a
// MoE layer: 256 × 3 modules a layer in DeepSeek-V3) are placed once. On a
// 46,000-module repo it does a few thousand lookups instead of 46,000. It is
// not safe for concurrent use.
type Locator struct {
	numHiddenLayers int
	cache           map[string]Place
}

// NewLocator returns a Locator for a model of numHiddenLayers decoder layers
// (0 when unknown).
func NewLocator(numHiddenLayers int) *Locator {
	return &Locator{numHiddenLayers: numHiddenLayers, cache: map[string]Place{}}
}

// Locate is Locate(name, numHiddenLayers).
func (l *Locator) Locate(name string) Place {
	p, _ := l.LocateShape(name)
	return p
}

// LocateShape is Locate, and the name's shape: the name with every
// all-digit dotted part after the layer number replaced by "*"
// ("model.layers.3.mlp.experts.*.up_proj"), the same for every module the
// lookup is shared with. A name with no such part is its own shape.
func (l *Locator) LocateShape(name string) (Place, string) {
	shape := Shape(name)
	if p, ok := l.cache[shape]; ok {
		return p, shape
	}
	// The digits replaced are not the layer's and no slot, kind or split
	// rule reads digits, so the shape places as the name does.
	p := Locate(shape, l.numHiddenLayers)
	l.cache[shape] = p
	return p, shape
}

// Shape replaces every all-digit dotted part of name after its layer
// number (the first number after a layers-like part, as Locate finds it)
// with "*". A name outside the layers is returned as it is.
func Shape(name string) string {
	at := LayerPart(name)
	if at < 0 || !hasDigitPart(name[partEnd(name, at):]) {
		return name
	}
	return string(appendShape(make([]byte, 0, len(name)), name, at))
}

// AppendShape appends Shape(name) to dst, for a caller that looks shapes up
// without a string apiece (a repo has tens of thousands of expert modules).
func AppendShape(dst []byte, name string) []byte {
	at := LayerPart(name)
	if at < 0 || !hasDigitPart(name[partEnd(name, at):]) {
		return append(dst, name...)
	}
	return appendShape(dst, name, at)
}

// partEnd is the end of the dotted part that starts at at.
func partEnd(name string, at int) int {
	i := at
	for i < len(name) && name[i] != '.' {
		i++
	}
	return i
}

func appendShape(b []byte, name string, at int) []byte {
	i := partEnd(name, at) // past the layer number's part
	rest := name[i:]
	b = append(b, name[:i]...)
	for len(rest) > 0 { // rest starts with '.'
		rest = rest[1:]
		j := strings.IndexByte(rest, '.')
		if j < 0 {
			j = len(rest)
		}
		b = append(b, '.')
		if part := rest[:j]; isNumber(part) {
			b = append(b, '*')
		} else {
			b = append(b, part...)
		}
		rest = rest[j:]
	}
	return b
}

// LayerPart is the byte offset in name of the dotted part holding the layer
// number, or -1 when Locate finds no layer in it.
func LayerPart(name string) int {
	start := 0
	for start < len(name) {
		end := strings.IndexByte(name[start:], '.')
		if end < 0 {
			return -1
		}
		end += start
		switch strings.ToLower(name[start:end]) {
		case "layers", "h", "blocks", "layer", "decoder_layers":
			next := name[end+1:]
			if k := strings.IndexByte(next, '.'); k >= 0 {
				next = next[:k]
			}
			if v, err := strconv.Atoi(next); err == nil && v >= 0 {
				return end + 1
			}
		}
		start = end + 1
	}
	return -1
}

func hasDigitPart(s string) bool {
	for len(s) > 0 {
		s = s[1:]
		j := strings.IndexByte(s, '.')
		if j < 0 {
			j = len(s)
		}
		if isNumber(s[:j]) {
			return true
		}
		s = s[j:]
	}
	return false
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
