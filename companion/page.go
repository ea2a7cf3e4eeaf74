package main

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/quantscope/quantscope"
	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// findWasm locates quantscope.wasm and wasm_exec.js: the --wasm folder, else
// beside the binary, else ./bin (where make wasm puts them).
func findWasm(dir string) (string, error) {
	var candidates []string
	if dir != "" {
		candidates = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Dir(exe))
		}
		candidates = append(candidates, "bin")
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "quantscope.wasm")); err == nil {
			if _, err := os.Stat(filepath.Join(c, "wasm_exec.js")); err == nil {
				return c, nil
			}
		}
	}
	return "", fmt.Errorf("no quantscope.wasm and wasm_exec.js in %s", strings.Join(candidates, " or "))
}

// pageHandler serves index.html and web/ from the binary and the wasm
// engine from disk.
func pageHandler(wasmDir string) http.Handler {
	static := http.FileServerFS(quantscope.Web)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch p := r.URL.Path; {
		case p == "/" || p == "/index.html":
			b, err := fs.ReadFile(quantscope.Web, "index.html")
			if err != nil {
				http.Error(w, "no page", http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(b)
		case strings.HasPrefix(p, "/wasm/"):
			name := strings.TrimPrefix(p, "/wasm/")
			if wasmDir == "" || (name != "quantscope.wasm" && name != "wasm_exec.js") {
				http.NotFound(w, r)
				return
			}
			if name == "quantscope.wasm" {
				w.Header().Set("Content-Type", "application/wasm")
			}
			http.ServeFile(w, r, filepath.Join(wasmDir, name))
		default:
			static.ServeHTTP(w, r)
		}
	})
}

// demoToken opens the gated demo repo; it is printed by `serve --demo` and
// shown on the page, since the demo is offline and local.
const demoToken = "hf_quantscope_demo"

type demoRepo struct{ id, about string }

// demoRepos lists what serve --demo offers: the generated repos, a gated
// copy of one, and one whose header breaks a rule.
func demoRepos() []demoRepo {
	var out []demoRepo
	for _, r := range synth.All() {
		out = append(out, demoRepo{r.ID, r.About})
	}
	llamas, _ := synth.DemoLlamas()
	for _, r := range llamas {
		out = append(out, demoRepo{r.ID, r.About + ", tokenizer.json (forward, eval)"})
	}
	return append(out,
		demoRepo{synth.Org + "/Llama-tiny-NVFP4-gated", "gated: needs the token " + demoToken},
		demoRepo{synth.Org + "/broken-header", "a shard whose header breaks the contiguous-offsets rule"})
}

func writeDemos(dir string) error {
	for _, r := range synth.All() {
		if err := r.WriteDir(filepath.Join(dir, filepath.FromSlash(r.ID))); err != nil {
			return err
		}
	}
	llamas, err := synth.DemoLlamas()
	if err != nil {
		return err
	}
	for _, r := range llamas {
		if err := r.WriteDir(filepath.Join(dir, filepath.FromSlash(r.ID))); err != nil {
			return err
		}
	}
	gated := synth.ModelOptNVFP4()
	gdir := filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4-gated")
	if err := gated.WriteDir(gdir); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gdir, localhub.GatedFile), []byte(demoToken+"\n"), 0o644); err != nil {
		return err
	}
	return writeBroken(filepath.Join(dir, synth.Org, "broken-header"))
}

// writeBroken writes a shard whose second tensor overlaps the first.
func writeBroken(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js := `{"model.embed_tokens.weight":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]},` +
		`"model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}`
	for len(js)%8 != 0 {
		js += " "
	}
	b := make([]byte, 8, 8+len(js)+32)
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	b = append(b, js...)
	b = append(b, make([]byte, 32)...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`+"\n"), 0o644)
}
