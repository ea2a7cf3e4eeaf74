// Command hub is the remote-inventory bench: it starts the local hub with 50 ms
// added to every response, generates an 80-shard repo shaped like
// nvidia/DeepSeek-R1-FP4 (about 2,300 NVFP4 tensors a shard, sparse files so
// nothing large is written), and runs `quantscope inspect` and the npm
// client's parseSafetensorsMetadata on it side by side, printing requests,
// bytes, wall time and the parameter counts each reports.
//
//	make bench-hub   (installs the pinned npm package first)
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
	st "github.com/quantscope/quantscope/formats/safetensors"
)

const repo = "bench/DeepSeek-R1-FP4-shape"

func main() {
	shards := flag.Int("shards", 80, "shards in the generated repo")
	latency := flag.Duration("latency", 50*time.Millisecond, "added to every hub response")
	bin := flag.String("quantscope", "bin/quantscope", "the quantscope binary")
	node := flag.String("node", "node", "node, for the npm client")
	script := flag.String("script", "bench/hub/parse.mjs", "the npm client's runner")
	keep := flag.String("generate-only", "", "only write the repo under this folder and exit")
	flag.Parse()
	if *keep != "" {
		if _, _, err := generate(filepath.Join(*keep, filepath.FromSlash(repo)), *shards); err != nil {
			fmt.Fprintln(os.Stderr, "bench-hub:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*shards, *latency, *bin, *node, *script); err != nil {
		fmt.Fprintln(os.Stderr, "bench-hub:", err)
		os.Exit(1)
	}
}

func run(shards int, latency time.Duration, bin, node, script string) error {
	root, err := os.MkdirTemp("", "quantscope-bench-hub-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	headerBytes, jsonBytes, err := generate(filepath.Join(root, filepath.FromSlash(repo)), shards)
	if err != nil {
		return err
	}
	h, err := localhub.New(root, localhub.Options{Latency: latency})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String()

	type result struct {
		name            string
		requests, bytes int64
		wall            time.Duration
		parameters      float64
		note            string
	}
	// Each client runs once to warm the page cache and the hub, then three
	// times in alternation; the median wall time is reported, the traffic
	// of the last run.
	clients := []func() (result, error){
		func() (result, error) {
			h.ResetStats()
			t0 := time.Now()
			out, err := exec.Command(bin, "inspect", "--json", "--endpoint", url, repo).Output()
			wall := time.Since(t0)
			if err != nil {
				return result{}, fmt.Errorf("quantscope inspect: %w", err)
			}
			var inv struct {
				Summary struct {
					Parameters float64            `json:"parameters"`
					ByFormat   map[string]float64 `json:"parameters_by_format"`
				}
				Fetch struct{ Requests, Bytes int64 }
			}
			if err := json.Unmarshal(out, &inv); err != nil {
				return result{}, err
			}
			req, by := h.Stats()
			return result{"quantscope inspect --json", req, by, wall, inv.Summary.Parameters,
				fmt.Sprintf("by format %v; the client counted %d requests, %d bytes", inv.Summary.ByFormat, inv.Fetch.Requests, inv.Fetch.Bytes)}, nil
		},
		func() (result, error) {
			h.ResetStats()
			t0 := time.Now()
			cmd := exec.Command(node, script, url, repo)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			wall := time.Since(t0)
			if err != nil {
				return result{}, fmt.Errorf("npm client: %w: %s", err, stderr.String())
			}
			var js struct {
				MS         float64            `json:"ms"`
				Parameters float64            `json:"parameters"`
				ByDtype    map[string]float64 `json:"byDtype"`
			}
			if err := json.Unmarshal(out, &js); err != nil {
				return result{}, fmt.Errorf("npm client output %q: %w", out, err)
			}
			req, by := h.Stats()
			return result{"@huggingface/hub 2.17.5 parseSafetensorsMetadata", req, by, wall, js.Parameters,
				fmt.Sprintf("by dtype %v; %.0f ms inside node", js.ByDtype, js.MS)}, nil
		},
	}
	rows := make([]result, len(clients))
	walls := make([][]time.Duration, len(clients))
	for round := range 4 {
		for i, run := range clients {
			r, err := run()
			if err != nil {
				return err
			}
			if round > 0 {
				rows[i] = r
				walls[i] = append(walls[i], r.wall)
			}
		}
	}
	for i := range rows {
		slices.Sort(walls[i])
		rows[i].wall = walls[i][len(walls[i])/2]
	}

	fmt.Printf("repo: %d shards, %d header bytes in all, %d bytes of JSON files; hub latency %v a response\n\n", shards, headerBytes, jsonBytes, latency)
	fmt.Printf("| client | requests | bytes | wall time (median of 3) | parameters reported |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %.2f s | %.0f |\n", r.name, r.requests, r.bytes, r.wall.Seconds(), r.parameters)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("%s: %s\n", r.name, r.note)
	}
	q, n := rows[0], rows[1]
	fmt.Printf("\ntargets: requests %d ≤ 2×%d+4 = %d: %v; bytes %d ≤ 1.25×%d+%d = %.0f: %v; wall %.2fs vs %.2fs = %.1f× faster (≥ 2×): %v\n",
		q.requests, shards, 2*shards+4, q.requests <= int64(2*shards+4),
		q.bytes, headerBytes, jsonBytes, 1.25*float64(headerBytes)+float64(jsonBytes), float64(q.bytes) <= 1.25*float64(headerBytes)+float64(jsonBytes),
		q.wall.Seconds(), n.wall.Seconds(), n.wall.Seconds()/q.wall.Seconds(), n.wall >= 2*q.wall)
	return nil
}

// generate writes the repo: per shard one layer's worth of NVFP4 experts as
// ModelOpt exports them, headers real and data sparse.
func generate(dir string, shards int) (headerBytes, jsonBytes int64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	const hidden, inter = 7168, 2048
	weightMap := map[string]string{}
	var total uint64
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var entries []st.Entry
		const linearsPerShard = 575 // 2,300 tensors: weight, weight_scale, weight_scale_2, input_scale each
		for k := range linearsPerShard {
			g := s*linearsPerShard + k // 256 experts × 3 projections a layer, from layer 3 as in DeepSeek-R1
			layer, expert := 3+g/768, (g%768)/3
			p := []struct {
				proj    string
				out, in uint64
			}{{"gate_proj", inter, hidden}, {"up_proj", inter, hidden}, {"down_proj", hidden, inter}}[g%3]
			pre := fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.", layer, expert, p.proj)
			entries = append(entries,
				st.Entry{Name: pre + "weight", DType: st.U8, Shape: []uint64{p.out, p.in / 2}, NBytes: p.out * p.in / 2},
				st.Entry{Name: pre + "weight_scale", DType: st.F8_E4M3, Shape: []uint64{p.out, p.in / 16}, NBytes: p.out * p.in / 16},
				st.Entry{Name: pre + "weight_scale_2", DType: st.F32, Shape: []uint64{}, NBytes: 4},
				st.Entry{Name: pre + "input_scale", DType: st.F32, Shape: []uint64{}, NBytes: 4})
		}
		hdr, n, err := st.EncodeHeader(entries, map[string]string{"format": "pt"})
		if err != nil {
			return 0, 0, err
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return 0, 0, err
		}
		if _, err := f.Write(hdr); err != nil {
			return 0, 0, err
		}
		if err := f.Truncate(int64(len(hdr)) + int64(n)); err != nil { // sparse: no data written
			return 0, 0, err
		}
		f.Close()
		headerBytes += int64(len(hdr))
		total += n
		for _, e := range entries {
			weightMap[e.Name] = name
		}
	}
	files := map[string]any{
		"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap},
		"config.json": map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
			"quantization_config": map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}},
		"hf_quant_config.json": map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.23.0"},
			"quantization": map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16, "exclude_modules": []string{"lm_head"}}},
	}
	for p, v := range files {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return 0, 0, err
		}
		jsonBytes += int64(len(b))
	}
	return headerBytes, jsonBytes, nil
}
