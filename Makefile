# quantscope: see README.md.
GO      ?= go
BIN     := bin/quantscope
DEMO    := .cache/demo
FUZZTIME ?= 60s

.PHONY: wasm all build run test race vet bench bench-hub bench-decode fuzz demo demo-inspect clean

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./companion

# The main job on the embedded demo, offline: generate the demo repos (once,
# into the user's cache) and serve them from the local hub.
run: build wasm
	./$(BIN) serve --demo

# Inspect every demo repo from the command line.
demo-inspect: demo
	@for r in $(DEMO)/quantscope-demo/*; do ./$(BIN) inspect "$$r"; echo; done

demo: build
	./$(BIN) demo $(DEMO)

vet:
	$(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet ./wasm/...

test: vet
	$(GO) test -count=1 -timeout 30m ./...
	$(MAKE) race

# The concurrent parts again under the race detector.
race:
	$(GO) test -race -count=1 ./formats/hub ./formats/checkpoint ./companion/localhub ./companion/jobs ./wasm/session ./kernels/cpu ./companion/ops

# Speed as ratios against a memmove measured in the same run.
bench:
	@mkdir -p out
	$(GO) test -run '^$$' -bench . -count 5 ./formats/... ./kernels/... | tee out/bench.txt
	$(GO) test -run '^$$' -bench 'Forward$$|Forward1BShape' -benchtime 2s -count 1 ./model/ | tee -a out/bench.txt
	$(GO) run ./bench/table < out/bench.txt

# Each fuzz target for FUZZTIME (the seeds live in each package's testdata/).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./formats/safetensors
	$(GO) test -run '^$$' -fuzz '^FuzzUnpack$$' -fuzztime $(FUZZTIME) ./formats/packing
	$(GO) test -run '^$$' -fuzz '^FuzzDetect$$' -fuzztime $(FUZZTIME) ./formats/scheme
	$(GO) test -run '^$$' -fuzz '^FuzzPatternList$$' -fuzztime $(FUZZTIME) ./formats/scheme
	$(GO) test -run '^$$' -fuzz '^FuzzIndex$$' -fuzztime $(FUZZTIME) ./formats/checkpoint
	$(GO) test -run '^$$' -fuzz '^FuzzParseFrame$$' -fuzztime $(FUZZTIME) ./companion/proto
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) ./kernels/cuda/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./tokenizer
	$(GO) test -run '^$$' -fuzz '^FuzzEstimate$$' -fuzztime $(FUZZTIME) ./formats/fit

clean:
	rm -rf bin out .cache

# quantscope inspect against the npm client on an 80-shard repo served by the
# local hub with 50 ms latency; installs the pinned npm package first.
bench-hub: build
	npm install --prefix bench/hub --no-audit --no-fund --loglevel=error
	$(GO) run ./bench/hub

# quantscope decode --out against a numpy table decoder and cp, side by side
# on generated 7168×8192 FP8-block and NVFP4 modules (Debian's numpy: the
# pyenv python on PATH has none, and PyPI is not used).
bench-decode: build
	@/usr/bin/python3 -c 'import numpy' 2>/dev/null || apt-get install -y python3-numpy || (apt-get update && apt-get install -y python3-numpy)
	$(GO) run ./bench/decode -bin $(BIN) -python /usr/bin/python3

# The page's engine: quantscope.wasm and Go's wasm_exec.js beside the binary.
wasm:
	@mkdir -p bin
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags="-s -w" -o bin/quantscope.wasm ./wasm
	cp "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" bin/wasm_exec.js
	@printf 'quantscope.wasm: %s bytes, %s gzipped\n' "$$(wc -c < bin/quantscope.wasm)" "$$(gzip -9 -c bin/quantscope.wasm | wc -c)"

# CUDA (README "CUDA backend"). make ptx regenerates the committed PTX of
# kernels/cuda/ptx/*.cu with nvcc (Debian non-free nvidia-cuda-toolkit 11.8);
# the first line of each .ptx records the sha256 of its .cu and the .cuh
# headers, which kernels/cuda/ptx's test checks. make cuda builds the worker
# beside bin/quantscope (needs cuda.h and libcuda.so; no nvcc).
NVCC    ?= nvcc
# nvcc 11.8 wants gcc ≤ 11 (Debian's toolkit pulls in g++-11)
NVCCBIN ?= $(shell command -v g++-11 || echo g++)
PTXDIR  := kernels/cuda/ptx
.PHONY: ptx cuda
ptx:
	@for cu in $(PTXDIR)/*.cu; do \
		p=$${cu%.cu}.ptx; \
		sum=$$(cat $$cu $(PTXDIR)/*.cuh | sha256sum | cut -d' ' -f1); \
		$(NVCC) -ccbin $(NVCCBIN) -ptx -arch=compute_80 -I$(PTXDIR) -o $$p.tmp $$cu || exit 1; \
		{ echo "// quantscope-source-sha256: $$sum"; cat $$p.tmp; } > $$p; rm -f $$p.tmp; \
		echo "$$p"; \
	done

cuda:
	$(GO) build -tags cuda -o bin/quantscope-cuda-worker ./kernels/cuda/worker
