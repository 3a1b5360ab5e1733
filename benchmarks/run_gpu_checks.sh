#!/usr/bin/env bash
# Everything to run when a GPU is lent, one section per call of the device tool (10 minutes a command):
#
#   benchmarks/run_gpu_checks.sh fused   # under 9 min on an H200: the fused Triton kernels against today's
#                                        # path (benchmarks/gpu_fused_checks.py): per submodel, decode tok/s
#                                        # eager and with CUDA graphs in NVFP4 and FP8 at the real shape,
#                                        # the share of the card's bandwidth measured in the same process,
#                                        # the tokens against the reference path; kernel-check --device cuda
#                                        # for both formats; launch plans. Writes $OUT/fused.jsonl (one JSON
#                                        # object per result) and $OUT/fused.log. Without a GPU it runs the
#                                        # same script on the CPU (Triton's interpreter, a scaled-down shape)
#                                        # and says that the GPU measurements were skipped.
#   benchmarks/run_gpu_checks.sh shape   # about 8 min on an H200: the decode step on the real 30B-A3B shape
#                                        # through the CLI contract (capture on the GPU), eager against
#                                        # CUDA-graph decode per submodel in BF16 and NVFP4
#                                        # (docs/benchmarks-gpu.md), the quantized matmul paths against the
#                                        # reference (docs/quantization-gpu.md)
#   benchmarks/run_gpu_checks.sh real    # about 4 min: writes the full-size checkpoint in the real layout
#                                        # (19.3 GB NVFP4, tools/real_layout.py) on the device machine, loads
#                                        # it from a cold page cache, and measures load time, host and device
#                                        # memory against the plan, first-token time and tok/s per submodel,
#                                        # eager and with CUDA graphs, against the bandwidth limit
#                                        # (docs/benchmarks-real-gpu.md)
#   benchmarks/run_gpu_checks.sh         # all sections (longer than one call allows: run them one by one)
#
# Each writes its numbers to docs/ (or to $OUT when set, e.g. the device tool's output folder). It installs
# and downloads nothing: it needs a Python ($PYTHON, default python3) with a CUDA build of torch (and
# triton for the fused section); the runtime itself imports only torch and jinja2 (a torch dependency).
# $SCRATCH (default /tmp) holds the generated checkpoint of `real` (about 20 GB free needed).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-docs}"
py="${PYTHON:-python3}"
what="${1:-all}"
mkdir -p "$out"

header() {
    nvidia-smi -L || echo "nvidia-smi: no NVIDIA GPU visible"
    "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA GPU')"
}

have_gpu() {
    "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

section_fused() {  # the fused Triton kernels (issue 35): docs/benchmarks-gpu-fused.md is written from fused.jsonl
    local log="$out/fused.log" jsonl="$out/fused.jsonl"
    if have_gpu; then
        timeout 540 "$py" benchmarks/gpu_fused_checks.py --budget 480 --jsonl "$jsonl" 2>&1 | tee -a "$log"
    else
        echo "fused: no CUDA GPU: the GPU measurements are SKIPPED; running the same checks on the CPU" \
             "(Triton's interpreter, a scaled-down shape), which proves the script, not the speed" | tee -a "$log"
        timeout 900 "$py" benchmarks/gpu_fused_checks.py --cpu-dry-run --formats NVFP4 --jsonl "$jsonl" 2>&1 \
            | tee -a "$log"
    fi
}

section_shape() {
    timeout 120 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --device meta --steps 2 \
        | tee "$out/decode-check.log"
    timeout 150 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --submodel 12B --device cuda \
        --steps 8 | tee -a "$out/decode-check.log"
    timeout 330 "$py" benchmarks/cuda_30b_shape.py --out "$out/benchmarks-gpu.md"
    timeout 150 "$py" benchmarks/cuda_quant_check.py --out "$out/quantization-gpu.md"
}

section_real() {
    df -h "${SCRATCH:-/tmp}" | tail -1
    timeout 540 "$py" benchmarks/gpu_real_layout.py --folder "${SCRATCH:-/tmp}/real-layout" --format nvfp4 \
        --out "$out/benchmarks-real-gpu.md" 2>&1 | tee "$out/gpu-real-layout.log"
    rm -rf "${SCRATCH:-/tmp}/real-layout"
}

header
case "$what" in
    fused) section_fused ;;
    shape) section_shape ;;
    real) section_real ;;
    all) section_fused; section_shape; section_real ;;
    *) echo "unknown section '$what': use fused, shape, real or nothing (all)" >&2; exit 2 ;;
esac
