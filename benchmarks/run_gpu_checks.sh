#!/usr/bin/env bash
# Everything to run in one GPU session (the device tool gives ~15 minutes; this takes about 8 on an
# H200): the decode step on the real 30B-A3B shape through the CLI contract (capture on the GPU),
# then eager against CUDA-graph decode per submodel in BF16 and NVFP4 (docs/benchmarks-gpu.md),
# then the quantized matmul paths against the reference (docs/quantization-gpu.md). Each writes
# its numbers to docs/ (or to $OUT when set, e.g. the device tool's output folder). Needs a Python
# with a CUDA build of torch and this project's dependencies (installer/setup.sh makes one).
set -u
cd "$(dirname "$0")/../.."
out="${OUT:-docs}"
py="${PYTHON:-python}"
nvidia-smi -L || true
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
timeout 120 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --device meta --steps 2 | tee "$out/decode-check.log"
timeout 150 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --submodel 12B --device cuda --steps 8 \
    | tee -a "$out/decode-check.log"
timeout 330 "$py" benchmarks/cuda_30b_shape.py --out "$out/benchmarks-gpu.md"
timeout 150 "$py" benchmarks/cuda_quant_check.py --out "$out/quantization-gpu.md"
