package model

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
)

// bias reads a projection's bias as float32 when its architecture gives it
// one (Config.Bias), else nil: a stored bias the architecture lacks is not
// used, as Hugging Face ignores unexpected weights.
func (m *Model) bias(mod *scheme.Module) ([]float32, error) {
	info, err := m.biasInfo(mod)
	if info == nil || err != nil {
		return nil, err
	}
	return m.floats(info)
}

// checkBias checks, headers only, that a projection stores the bias its
// architecture gives it.
func (m *Model) checkBias(name string) error {
	mod, _ := m.c.Module(name)
	if _, err := m.biasInfo(mod); err != nil {
		return fmt.Errorf("%s: %w", m.c.Source.Name(), err)
	}
	return nil
}

// biasInfo is the tensor of a projection's bias when its architecture
// gives it one (nil otherwise); one it needs but lacks, or of the wrong
// shape, is an error naming the tensor and the rule: Hugging Face would
// leave such a bias randomly initialised.
func (m *Model) biasInfo(mod *scheme.Module) (*scheme.TensorInfo, error) {
	want, rule := m.Config.Bias(projection(mod.Name))
	if !want {
		return nil, nil
	}
	info, ok := mod.Info("bias")
	if !ok {
		return nil, fmt.Errorf("no tensor %q: %s, so the model has this bias and the checkpoint must store it", mod.Name+".bias", rule)
	}
	rows, _ := mod.Matrix2D()
	if info.NBytes == 0 || uint64(len(info.Shape)) != 1 || info.Shape[0] != rows || !info.DType.IsFloat() {
		return nil, fmt.Errorf("module %q: tensor %q: bias %s %v, want a float [%d]", mod.Name, info.Name, info.DType, info.Shape, rows)
	}
	return info, nil
}

// projection is a layer module's name without "model.layers.N.".
func projection(name string) string {
	if _, p, ok := strings.Cut(strings.TrimPrefix(name, "model.layers."), "."); ok {
		return p
	}
	return name
}

func (m *Model) floats(info *scheme.TensorInfo) ([]float32, error) {
	b, err := m.c.ReadTensor(info.Name, 0, int64(info.NBytes))
	if err != nil {
		return nil, err
	}
	v, err := numeric.Decode(info.DType, b)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", info.Name, err)
	}
	return v, nil
}

// checkW4A refuses --w4a fp8 unless every projection of every layer is a
// GPTQ INT4 module of the kind the W4A linear takes.
func (m *Model) checkW4A() error {
	s := m.c.Scheme
	for l := range m.Config.Layers {
		for _, p := range projections {
			name := fmt.Sprintf("model.layers.%d.%s", l, p)
			mod, _ := m.c.Module(name)
			if err := w4aModule(mod, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func w4aModule(mod *scheme.Module, s *scheme.Scheme) error {
	if rule, why := scheme.W4AReady(mod, s); rule != "" {
		return &kernels.W4AError{Module: mod.Name, Rule: rule, Msg: why}
	}
	return nil
}

// w4aWeight reads a GPTQ module's tensors and prepares its centred codes.
func (m *Model) w4aWeight(mod *scheme.Module, bias []float32) (*kernels.W4AWeight, error) {
	out, in := mod.Matrix2D()
	g := kernels.GPTQInt4{Name: mod.Name, In: int(in), Out: int(out), V1: mod.Layout == scheme.LayoutGPTQ, Bias: bias}
	raw := func(role string, want safetensors.DType) ([]byte, error) {
		info, ok := mod.Info(role)
		if !ok {
			return nil, nil
		}
		if info.DType != want {
			return nil, fmt.Errorf("module %q: tensor %q: %s is %s, GPTQ stores it as %s", mod.Name, info.Name, role, info.DType, want)
		}
		return m.c.ReadTensor(info.Name, 0, int64(info.NBytes))
	}
	var err error
	if g.QWeight, err = raw("qweight", safetensors.I32); err != nil {
		return nil, err
	}
	if g.QWeight == nil {
		return nil, fmt.Errorf("module %q: no qweight", mod.Name)
	}
	if g.QZeros, err = raw("qzeros", safetensors.I32); err != nil {
		return nil, err
	}
	sc, ok := mod.Info("scales")
	if !ok {
		return nil, fmt.Errorf("module %q: no scales", mod.Name)
	}
	if g.Scales, err = m.floats(sc); err != nil {
		return nil, err
	}
	gi, err := raw("g_idx", safetensors.I32)
	if err != nil {
		return nil, err
	}
	if gi != nil {
		g.GIdx = make([]int32, len(gi)/4)
		for i := range g.GIdx {
			g.GIdx[i] = int32(binary.LittleEndian.Uint32(gi[4*i:]))
		}
	}
	return kernels.PrepareW4A(g)
}
