# quantscope: see README.md.
GO      ?= go
BIN     := bin/quantscope
DEMO    := .cache/demo
FUZZTIME ?= 60s

.PHONY: wasm all build run test race vet bench bench-hub fuzz demo demo-inspect clean

all: build

build:
	$(GO) build -o $(BIN) ./companion

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
	$(GO) test -run '^$$' -fuzz '^FuzzIndex$$' -fuzztime $(FUZZTIME) ./formats/checkpoint
	$(GO) test -run '^$$' -fuzz '^FuzzParseFrame$$' -fuzztime $(FUZZTIME) ./companion/proto

clean:
	rm -rf bin out .cache

# quantscope inspect against the npm client on an 80-shard repo served by the
# local hub with 50 ms latency; installs the pinned npm package first.
bench-hub: build
	npm install --prefix bench/hub --no-audit --no-fund --loglevel=error
	$(GO) run ./bench/hub

# The page's engine: quantscope.wasm and Go's wasm_exec.js beside the binary.
wasm:
	@mkdir -p bin
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags="-s -w" -o bin/quantscope.wasm ./wasm
	cp "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" bin/wasm_exec.js
	@printf 'quantscope.wasm: %s bytes, %s gzipped\n' "$$(wc -c < bin/quantscope.wasm)" "$$(gzip -9 -c bin/quantscope.wasm | wc -c)"
