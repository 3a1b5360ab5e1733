#!/usr/bin/env bash
# Everything to run when a GPU is lent, in calls that each fit the device tool's 10 minutes a command:
#
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
#   benchmarks/run_gpu_checks.sh experts # about 5 min: routed experts in RAM (runtime/placement.py): the split
#                                        # step on CUDA (a graph for the submodel that stays on the card, eager
#                                        # for those that reach RAM), then the full-size file (written again if
#                                        # `real` removed it) loaded plainly, with --cpu-experts all and nested:
#                                        # tok/s per submodel against the planner's expectation, memory on both
#                                        # sides (docs/benchmarks-placement-gpu.md)
#   benchmarks/run_gpu_checks.sh         # all three (longer than one call allows: use the three above)
#
# Each writes its numbers to docs/ (or to $OUT when set, e.g. the device tool's output folder). Needs a
# Python with a CUDA build of torch and this project's dependencies (installer/setup.sh makes one);
# $SCRATCH (default /tmp) holds the generated checkpoint (about 20 GB free needed).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-docs}"
py="${PYTHON:-python}"
what="${1:-all}"
nvidia-smi -L || true
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
if [ "$what" = shape ] || [ "$what" = all ]; then
    timeout 120 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --device meta --steps 2 | tee "$out/decode-check.log"
    timeout 150 "$py" -m runtime decode-check --config tests/data/star-elastic-30b --submodel 12B --device cuda --steps 8 \
        | tee -a "$out/decode-check.log"
    timeout 330 "$py" benchmarks/cuda_30b_shape.py --out "$out/benchmarks-gpu.md"
    timeout 150 "$py" benchmarks/cuda_quant_check.py --out "$out/quantization-gpu.md"
fi
if [ "$what" = real ] || [ "$what" = all ]; then
    df -h "${SCRATCH:-/tmp}" | tail -1
    timeout 540 "$py" benchmarks/gpu_real_layout.py --folder "${SCRATCH:-/tmp}/real-layout" --format nvfp4 \
        --out "$out/benchmarks-real-gpu.md" 2>&1 | tee "$out/gpu-real-layout.log"
    rm -rf "${SCRATCH:-/tmp}/real-layout"
fi
if [ "$what" = experts ] || [ "$what" = all ]; then
    timeout 90 "$py" -m runtime decode-check --config tests/data/star-elastic-30b/nvfp4 --device cuda --steps 4 \
        --cpu-experts nested:12B | tee "$out/decode-check-placement.log"
    timeout 330 "$py" benchmarks/gpu_placement.py --folder "${SCRATCH:-/tmp}/real-layout/nvfp4" \
        --out "$out/benchmarks-placement-gpu.md" 2>&1 | tee "$out/gpu-placement.log"
    rm -rf "${SCRATCH:-/tmp}/real-layout"
fi
