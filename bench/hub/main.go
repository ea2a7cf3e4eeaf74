// Command hub is the remote-inventory bench: it starts the local hub with 50 ms
// added to every response, generates an 80-shard repo shaped like
// nvidia/DeepSeek-R1-FP4 (its 180,364 tensors and 245 exclude_modules, sparse files so
// nothing large is written), and runs `quantscope inspect` and the npm
// client's parseSafetensorsMetadata on it side by side, printing requests,
// bytes, wall time, CPU time (the child's user + system, from its rusage) and
// the parameter counts each reports. The hub redirects to a CDN on a second
// origin, as huggingface.co does.
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
	"github.com/quantscope/quantscope/synth"
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
		if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(*keep, filepath.FromSlash(repo)), *shards); err != nil {
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
	headerBytes, jsonBytes, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(root, filepath.FromSlash(repo)), shards)
	if err != nil {
		return err
	}
	// The hub and its CDN on two origins, as huggingface.co redirects to
	// another host; one server answers both and counts every request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cdnLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h, err := localhub.New(root, localhub.Options{Latency: latency, CDN: "http://" + cdnLn.Addr().String()})
	if err != nil {
		return err
	}
	for _, l := range []net.Listener{ln, cdnLn} {
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		defer srv.Close()
	}
	url := "http://" + ln.Addr().String()

	type result struct {
		name            string
		requests, bytes int64
		wall, cpu       time.Duration // cpu: the child's user + system time
		parameters      float64
		note            string
	}
	// Each client runs once to warm the page cache and the hub, then three
	// times in alternation; the median wall time is reported, the traffic
	// of the last run.
	inspect := func(name string) func() (result, error) {
		return func() (result, error) {
			h.ResetStats()
			// Its 68 MB of JSON go to a file, as `> out.json` would: read
			// through a pipe into this process's fresh memory, they made the
			// first runs wait seconds on their writes.
			outPath := filepath.Join(root, "inventory.json")
			f, err := os.Create(outPath)
			if err != nil {
				return result{}, err
			}
			var stderr bytes.Buffer
			cmd := exec.Command(bin, "inspect", "--json", "--endpoint", url, repo)
			cmd.Stdout, cmd.Stderr = f, &stderr
			t0 := time.Now()
			err = cmd.Run()
			wall := time.Since(t0)
			f.Close()
			if err != nil {
				return result{}, fmt.Errorf("quantscope inspect: %w: %s", err, stderr.String())
			}
			out, err := os.ReadFile(outPath)
			if err != nil {
				return result{}, err
			}
			cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
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
			return result{name, req, by, wall, cpu, inv.Summary.Parameters,
				fmt.Sprintf("by format %v; the client counted %d requests, %d bytes", inv.Summary.ByFormat, inv.Fetch.Requests, inv.Fetch.Bytes)}, nil
		}
	}
	// The second inspect follows the first at once. On a VM whose balloon
	// hands freed memory back to its host a couple of seconds after a
	// process exits (this one), the first run after the npm client's
	// seconds finds its fresh pages cold: each costs a fault in the host
	// as well (about 0.2 s of system time for an inventory's 100 MB). The
	// second finds them warm, as a machine without such a balloon always
	// does. Both are reported.
	clients := []func() (result, error){
		inspect("quantscope inspect --json"),
		inspect("the same, run again at once (memory warm)"),
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
			cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			var js struct {
				MS         float64            `json:"ms"`
				Parameters float64            `json:"parameters"`
				ByDtype    map[string]float64 `json:"byDtype"`
			}
			if err := json.Unmarshal(out, &js); err != nil {
				return result{}, fmt.Errorf("npm client output %q: %w", out, err)
			}
			req, by := h.Stats()
			return result{"@huggingface/hub 2.17.5 parseSafetensorsMetadata", req, by, wall, cpu, js.Parameters,
				fmt.Sprintf("by dtype %v; %.0f ms inside node", js.ByDtype, js.MS)}, nil
		},
	}
	rows := make([]result, len(clients))
	walls := make([][]time.Duration, len(clients))
	cpus := make([][]time.Duration, len(clients))
	for round := range 4 {
		for i, run := range clients {
			r, err := run()
			if err != nil {
				return err
			}
			if round > 0 {
				rows[i] = r
				walls[i] = append(walls[i], r.wall)
				cpus[i] = append(cpus[i], r.cpu)
			}
		}
	}
	for i := range rows {
		slices.Sort(walls[i])
		slices.Sort(cpus[i])
		rows[i].wall = walls[i][len(walls[i])/2]
		rows[i].cpu = cpus[i][len(cpus[i])/2]
	}

	fmt.Printf("repo: %d shards, %d header bytes in all, %d bytes of JSON files; hub latency %v a response, CDN on another origin\n\n", shards, headerBytes, jsonBytes, latency)
	fmt.Printf("| client | requests | bytes | wall time (median of 3) | CPU time, user + sys (median of 3) | parameters reported |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %.2f s | %.2f s | %.0f |\n", r.name, r.requests, r.bytes, r.wall.Seconds(), r.cpu.Seconds(), r.parameters)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("%s: %s\n", r.name, r.note)
	}
	q, w, n := rows[0], rows[1], rows[2]
	fmt.Printf("\ntargets: requests %d ≤ 2×%d+4 = %d: %v; bytes %d ≤ 1.25×%d+%d = %.0f: %v; wall %.2fs vs %.2fs = %.1f× faster (≥ 3×): %v; inspect CPU < 0.5 s: %.2f s after the npm client (cold memory): %v, %.2f s run again at once (warm): %v\n",
		q.requests, shards, 2*shards+4, q.requests <= int64(2*shards+4),
		q.bytes, headerBytes, jsonBytes, 1.25*float64(headerBytes)+float64(jsonBytes), float64(q.bytes) <= 1.25*float64(headerBytes)+float64(jsonBytes),
		q.wall.Seconds(), n.wall.Seconds(), n.wall.Seconds()/q.wall.Seconds(), n.wall >= 3*q.wall,
		q.cpu.Seconds(), q.cpu < 500*time.Millisecond, w.cpu.Seconds(), w.cpu < 500*time.Millisecond)
	return nil
}
