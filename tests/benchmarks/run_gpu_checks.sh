#!/usr/bin/env bash
# Everything to run in one GPU session (the device tool gives ~15 minutes): the quantized matmul
# paths against the reference, then the 30B-shape benchmark. Each writes its numbers to docs/
# (or to $OUT when set, e.g. the device tool's output folder). Needs a Python with a CUDA build
# of torch and this project's dependencies (installer/setup.sh makes one).
set -u
cd "$(dirname "$0")/../.."
out="${OUT:-docs}"
py="${PYTHON:-python}"
nvidia-smi -L || true
timeout 240 "$py" tests/benchmarks/cuda_quant_check.py --out "$out/quantization-gpu.md"
timeout 480 "$py" tests/benchmarks/cuda_30b_shape.py --out "$out/benchmarks-gpu.md"
