#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU: parity of every
# GPU kernel with the CPU backend, then the benchmarks, then torch's
# reference figures on the same device. Results go under $OUT (default
# out/gpu-check): parity.txt, bench.txt, summary.json (with torch's figures).
#
# It uses bin/quantscope-cuda-worker and bin/cuda.test when present (built
# elsewhere: `make cuda` and `go test -c -o bin/cuda.test ./kernels/cuda`,
# then carried), else builds them (needs Go, cuda.h and libcuda.so).
#
# On a lent H200 (the `run` tool), from a machine with the toolchain:
#   make cuda && go test -c -o bin/cuda.test ./kernels/cuda
#   run: bash kernels/cuda/gpu-check.sh   carry: bin/quantscope-cuda-worker, bin/cuda.test
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" >"$OUT/nvidia-smi.txt"

if [ ! -x bin/quantscope-cuda-worker ]; then
  go build -tags cuda -o bin/quantscope-cuda-worker ./kernels/cuda/worker || { echo "cannot build the worker" | tee "$OUT/error.txt"; exit 1; }
fi
if [ ! -x bin/cuda.test ]; then
  go test -c -o bin/cuda.test ./kernels/cuda || { echo "cannot build the test binary" | tee "$OUT/error.txt"; exit 1; }
fi
export QUANTSCOPE_CUDA_WORKER=$PWD/bin/quantscope-cuda-worker

# parity (and the client's own tests, on the fake worker)
(cd kernels/cuda && timeout 300 ../../bin/cuda.test -test.v -test.count=1) >"$OUT/parity.txt" 2>&1
parity=$?
if grep -q -- '--- SKIP: TestGPU' "$OUT/parity.txt"; then
  echo "GPU parity tests skipped: no GPU reached (see parity.txt)" | tee -a "$OUT/error.txt"
  parity=1
fi
grep -E '^(--- |ok|PASS|FAIL)|GPU:' "$OUT/parity.txt" | head -40

# benchmarks: worker-side time of each request (staging + PCIe included)
(cd kernels/cuda && timeout 300 ../../bin/cuda.test -test.run '^$' -test.bench GPU -test.benchtime 5x) >"$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt" | grep -E 'Benchmark|ok|FAIL'

# torch on the same device: copy bandwidths and the bf16 matmul of the W4A shape
timeout 200 python3 - "$OUT" <<'PY' || echo "torch figures failed" >>"$OUT/error.txt"
import json, re, sys, time
import torch
out = sys.argv[1]
dev = torch.device("cuda")
def timed(fn, reps=20):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device=dev); b = torch.empty_like(a)
d2d = 2 * n / timed(lambda: b.copy_(a)) / 1e9           # read + write
h = torch.empty(n, dtype=torch.uint8).pin_memory()
h2d = n / timed(lambda: a.copy_(h, non_blocking=True), 10) / 1e9
T, K, N = 2048, 4096, 4096
x = torch.randn(T, K, device=dev, dtype=torch.bfloat16); w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
mm = 2 * T * K * N / timed(lambda: x @ w.t(), 50) / 1e12
res = {"device": torch.cuda.get_device_name(), "d2d_copy_GBps": d2d, "pinned_h2d_GBps": h2d, "torch_bf16_matmul_TFLOPs_2048x4096x4096": mm}
bench = open(f"{out}/bench.txt").read()
for name, unit in [("GPUDequantNVFP4", "worker-GB/s"), ("GPUQuantNVFP4/max", "worker-GB/s"), ("GPUQuantNVFP4/mse", "worker-ms/op"), ("GPUW4AFP8", "worker-TFLOP/s")]:
    m = re.search(r"Benchmark%s\S*\s.*?([\d.]+) %s" % (re.escape(name), re.escape(unit)), bench)
    if m: res[name + " " + unit] = float(m.group(1))
for name, unit in [("GPUQuantFP8/e4m3-row-inv", "worker-GB/s"), ("GPUQuantFP8/e4m3-block128", "worker-GB/s"), ("GPUQuantFP8/e5m2-tensor", "worker-GB/s"), ("GPUQuantNVFP4Recipes/four_six", "worker-ms/op"), ("GPUQuantNVFP4Recipes/least_squares", "worker-ms/op"), ("GPUQuantNVFP4Recipes/local_hessian", "worker-ms/op")]:  # quant2
    m = re.search(r"Benchmark%s\S*\s.*?([\d.]+) %s" % (re.escape(name), re.escape(unit)), bench)
    if m: res[name + " " + unit] = float(m.group(1))
    if m and unit == "worker-GB/s": res[name + " fraction of d2d copy"] = float(m.group(1)) / d2d
for k in ("GPUDequantNVFP4 worker-GB/s", "GPUQuantNVFP4/max worker-GB/s"):
    if k in res: res[k.split()[0] + " fraction of d2d copy"] = res[k] / d2d
if "GPUW4AFP8 worker-TFLOP/s" in res: res["w4a vs torch bf16"] = res["GPUW4AFP8 worker-TFLOP/s"] / mm
for name in ("GPUDequantInt/gptq4", "GPUDequantInt/awq4", "GPUDequantInt/ct3", "GPUStats/gptq4", "GPUStats/nvfp4"):  # dequant_int.cu
    m = re.search(r"Benchmark%s\S*\s.*?([\d.]+) worker-GB/s" % re.escape(name), bench)
    if m: res[name + " worker-GB/s"] = float(m.group(1)); res[name + " fraction of d2d copy"] = float(m.group(1)) / d2d
m = re.search(r"BenchmarkGPUW4ANVFP4(?:-\d+)?\s.*?([\d.]+) worker-TFLOP/s", bench)
if m: res["GPUW4ANVFP4 worker-TFLOP/s"] = float(m.group(1)); res["w4a_nvfp4 vs torch bf16"] = float(m.group(1)) / mm
m = re.search(r"BenchmarkGPUW4AFP8TC(?:-\d+)?\s.*?([\d.]+) worker-TFLOP/s", bench)
if m: res["GPUW4AFP8TC worker-TFLOP/s"] = float(m.group(1)); res["w4a_fp8 tensor cores vs torch bf16"] = float(m.group(1)) / mm
m = re.search(r"BenchmarkGPUW4ANVFP4TC(?:-\d+)?\s.*?([\d.]+) worker-TFLOP/s", bench)
if m: res["GPUW4ANVFP4TC worker-TFLOP/s"] = float(m.group(1)); res["w4a_nvfp4 tensor cores vs torch bf16"] = float(m.group(1)) / mm
m = re.search(r"BenchmarkGPUForward1BShape(?:-\d+)?\s.*?([\d.]+) tokens/s", bench)
if m: res["1B-shape forward (16 tokens, W4A-FP8; head on the CPU) tokens/s"] = float(m.group(1))
json.dump(res, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
exit $parity
