#!/usr/bin/env bash
# The GPU checks of issue 37, unattended, on a machine with a CUDA device (one GPU, 16 cores:
# about five minutes), from a fresh clone: it installs what it needs first (the machine's own
# CUDA build of torch is kept: pip only adds what is missing; OWT_NO_INSTALL=1 skips this):
#
#     bash benchmarks/gpu_checks.sh
#
# 1. the tests of CUDA code paths (pytest -m cuda: the device stage's pinned ring and side
#    stream, FlexAttention's block mask compiled on the GPU), none of them may be skipped;
# 2. the device stage's tests on the CPU, and the block mask's;
# 3. benchmarks/bench_gpu_feed.py: a small GPT trained from best-fit batches with and without
#    the device stage, and the first batch with and without start(): one JSON line;
# 4. examples/train_gpt.py for a few steps on the GPU (it uses the device stage there).
# Every result is printed; the exit status is non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
failed=()
if [[ "${OWT_NO_INSTALL:-}" != 1 ]]; then
    python3 -m pip install --quiet -e '.[torch,tokenize,test]' || exit 3
fi

step() {
    local name=$1
    shift
    echo "=== $name: $*"
    if "$@"; then echo "=== $name: ok"; else echo "=== $name: FAILED ($?)"; failed+=("$name"); fi
}

if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "no CUDA device: torch.cuda.is_available() is False (torch $(python3 -c 'import torch; print(torch.__version__)'))"
    exit 2
fi
python3 -c 'import torch; print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'

# -rs lists skips; a CUDA test skipped here is a failure (grep finds its SKIPPED line).
cuda_tests() {
    local log
    log=$(mktemp)
    python3 -m pytest tests/test_torch_device.py tests/test_torch_masks.py -m cuda -rs -q \
        -p no:cacheprovider 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    if grep -q "SKIPPED" "$log"; then echo "a CUDA test was skipped"; status=1; fi
    rm -f "$log"
    return "$status"
}
step "CUDA tests" cuda_tests
step "device stage and mask tests" python3 -m pytest tests/test_torch_device.py \
    tests/test_torch_masks.py -q -p no:cacheprovider -m "not cuda"
step "GPU feed benchmark" python3 benchmarks/bench_gpu_feed.py
example() {
    local dir
    dir=$(mktemp -d)
    python3 examples/train_gpt.py --steps 30 --eval-every 10 --segments --packing bestfit \
        --checkpoint "$dir/gpt.pt" && rm -rf "$dir"
}
step "train_gpt example on CUDA" example

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all GPU checks passed"
