// Command decode measures `quantscope decode --out` side by side with a numpy
// table decoder (numpy_decode.py) and `cp` of a file of the output's size,
// in one run, on a generated 7168×8192 FP8-block module (DeepSeek-V3 layout)
// and a 7168×8192 NVFP4 module (ModelOpt layout). Each round runs the three
// in turn; the table shows the median of the rounds (and the best) and the
// ratios of the medians. quantscope's and numpy's outputs are checked to be
// byte-identical.
//
//	go run ./bench/decode [-bin bin/quantscope] [-python /usr/bin/python3] [-dir out/bench-decode] [-rounds 5]
//
// (from the repository root; `make bench-decode` builds the binary and installs numpy first).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

const rows, cols = 7168, 8192

const module = "model.layers.0.mlp.down_proj"

func main() {
	bin := flag.String("bin", "bin/quantscope", "the quantscope binary")
	python := flag.String("python", "/usr/bin/python3", "a python with numpy")
	dir := flag.String("dir", "out/bench-decode", "where the generated modules and outputs go")
	rounds := flag.Int("rounds", 5, "rounds of the three commands")
	script := flag.String("script", "bench/decode/numpy_decode.py", "the numpy decoder")
	flag.Parse()
	fmt.Printf("Wall seconds, median of %d rounds (best), and the CPU seconds (user+sys) of the same runs; dd is\n"+
		"a plain write() of the output's size from /dev/zero in 2 MiB blocks (the floor for any program that\n"+
		"writes its output; cp copies inside the kernel with copy_file_range).\n\n", *rounds)
	fmt.Printf("| module (7168×8192, %d MiB of float32 out) | quantscope decode --out | numpy table decoder | cp of the output | dd of the output size | quantscope / numpy | quantscope / cp |\n|---|---|---|---|---|---|---|\n", rows*cols*4>>20)
	for _, kind := range []string{"fp8-block", "nvfp4"} {
		repo := filepath.Join(*dir, kind)
		if err := generate(repo, kind); err != nil {
			fail(err)
		}
		file := filepath.Join(repo, "model.safetensors")
		qOut, nOut, cOut := filepath.Join(*dir, kind+".quantscope.f32"), filepath.Join(*dir, kind+".numpy.f32"), filepath.Join(*dir, kind+".cp.f32")
		dOut := filepath.Join(*dir, kind+".dd.f32")
		var q, n, c, d times
		for r := range *rounds {
			q.add(timed(qOut, *bin, "decode", "--out", qOut, repo, module))
			n.add(timed(nOut, *python, *script, kind, file, module, nOut))
			c.add(timed(cOut, "cp", qOut, cOut))
			d.add(timed(dOut, "dd", "if=/dev/zero", "of="+dOut, "bs=2M", fmt.Sprintf("count=%d", rows*cols*4/(2<<20)), "status=none"))
			if r == 0 {
				same(qOut, nOut)
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %.2f× (CPU %.2f×) | %.2f× (CPU %.2f×) |\n", kind, q, n, c, d,
			median(q.wall)/median(n.wall), median(q.cpu)/median(n.cpu), median(q.wall)/median(c.wall), median(q.cpu)/median(c.cpu))
		for _, p := range []string{qOut, nOut, cOut, dOut} {
			os.Remove(p)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/decode:", err)
	os.Exit(1)
}

type times struct{ wall, cpu []float64 }

func (t *times) add(wall, cpu float64) { t.wall, t.cpu = append(t.wall, wall), append(t.cpu, cpu) }

func (t times) String() string {
	return fmt.Sprintf("%.3f s (best %.3f), CPU %.3f s", median(t.wall), slices.Min(t.wall), median(t.cpu))
}

// timed runs a command (its output file removed first) and returns its wall
// and CPU (user + system) seconds.
func timed(out, name string, args ...string) (wall, cpu float64) {
	os.Remove(out)
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("%s %v: %v: %s", name, args, err, stderr.Bytes()))
	}
	wall = time.Since(t0).Seconds()
	return wall, (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

func same(a, b string) {
	x, err := os.ReadFile(a)
	if err != nil {
		fail(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		fail(err)
	}
	if len(x) != rows*cols*4 || !bytes.Equal(x, y) {
		fail(fmt.Errorf("%s (%d bytes) and %s (%d bytes) differ", a, len(x), b, len(y)))
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// generate writes a one-module repo (once): seeded normal weights with a
// few outliers, quantized by synth's writers, with the producer's configs.
func generate(dir, kind string) error {
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "generating %s (once)...\n", dir)
	r := rand.New(rand.NewPCG(42, uint64(len(kind))))
	m := synth.Matrix{Shape: []uint64{rows, cols}, Data: make([]float32, rows*cols)}
	for i := range m.Data {
		m.Data[i] = float32(r.NormFloat64()) * 0.02
		if r.IntN(10000) == 0 {
			m.Data[i] *= 30
		}
	}
	var ts []safetensors.WriteTensor
	files := map[string]any{}
	switch kind {
	case "fp8-block":
		ts = synth.FP8Block(module, m, 128)
		files["config.json"] = map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
			"quantization_config": map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{128, 128}}}
	case "nvfp4":
		ts = synth.NVFP4ModelOpt(module, m, 4, safetensors.F32)
		files["config.json"] = map[string]any{"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
			"quantization_config": map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}}
		files["hf_quant_config.json"] = map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.29.0"},
			"quantization": map[string]any{"quant_algo": "NVFP4", "group_size": 16}}
	}
	data, err := safetensors.Encode(ts, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, v := range files {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644)
}
