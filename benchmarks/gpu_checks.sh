#!/usr/bin/env bash
# The GPU checks of issue 37, unattended, on a machine with a CUDA device (one GPU, 16 cores:
# about five minutes), from a fresh clone: it installs what it needs first (the machine's own
# CUDA build of torch is kept: pip only adds what is missing; OWT_NO_INSTALL=1 skips this):
#
#     bash benchmarks/gpu_checks.sh            # PYTHON=/path/to/python to pick the interpreter
#
# 1. the tests of CUDA code paths (pytest -m cuda: the device stage's pinned ring and side
#    stream, FlexAttention's block mask compiled on the GPU), none of them may be skipped;
# 2. the device stage's tests on the CPU, and the block mask's;
# 3. benchmarks/bench_gpu_feed.py: a small GPT trained from best-fit batches with and without
#    the device stage, and the first batch with and without start(): one JSON line, checked and
#    kept in $OWT_GPU_REPORT (default gpu_feed.json);
# 4. benchmarks/bench_start_early.py: Loader.batches' first batch after 3 s with and without
#    start() (on the CPU's workers);
# 5. examples/train_gpt.py for a few steps on the GPU (it uses the device stage there).
# Nothing is downloaded but the packages (the corpora are generated). Every step has a time
# limit; every result is printed; the exit status is 1 if any step failed. Without a CUDA
# device the CUDA steps (1, 3 and 5) are skipped, each named, and the others run (3 as its CPU
# smoke run): the status is then 0 if they passed, or 2 with OWT_REQUIRE_CUDA=1 (the GPU
# machine's runner may set it, so that a torch without CUDA is not taken for a pass).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
report=${OWT_GPU_REPORT:-gpu_feed.json}
failed=()
if [[ "${OWT_NO_INSTALL:-}" != 1 ]]; then
    # Not the whole `test` extra (S3, GCS, Ray, datasets servers): only what these tests import.
    "$PY" -m pip install --quiet -e '.[torch,tokenize]' 'pytest>=7.4' 'pytest-timeout>=2.2' \
        'hypothesis>=6.80' || exit 3
fi

step() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $*"
    timeout --kill-after=30 "$limit" bash -c '"$@"' "$name" "$@"  # a function too (exported)
    local status=$?
    if ((status == 0)); then echo "=== $name: ok"; return 0; fi
    if ((status == 124)); then echo "=== $name: FAILED (over its ${limit} s)"; else
        echo "=== $name: FAILED ($status)"; fi
    failed+=("$name")
}

skipped=()
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    cuda=1
    "$PY" -c 'import torch; print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
elif ! "$PY" -c 'import torch' 2>/dev/null; then
    cuda=0
    why="torch does not import in $PY (install the project: unset OWT_NO_INSTALL)"
    echo "$why: the CUDA steps are skipped, the others run"
else
    cuda=0
    why="no CUDA device: torch.cuda.is_available() is False (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
    echo "$why: the CUDA steps are skipped, the others run"
fi
# pytest-timeout bounds each test (installed above; with OWT_NO_INSTALL=1 maybe not: the step's
# own limit bounds the run then).
timeout_flag=$("$PY" -c 'import pytest_timeout' 2>/dev/null && echo "--timeout=600")
cuda_step() {  # a step of the GPU's: run, or named as skipped
    if ((cuda)); then step "$@"; else echo "=== $1: SKIPPED ($why)"; skipped+=("$1"); fi
}

# -rs lists skips; a CUDA test skipped here is a failure (grep finds its SKIPPED line).
cuda_tests() {
    local log
    log=$(mktemp)
    "$PY" -m pytest tests/test_torch_device.py tests/test_torch_masks.py -m cuda -rs -q \
        -p no:cacheprovider $timeout_flag 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    if grep -q "SKIPPED" "$log"; then echo "a CUDA test was skipped"; status=1; fi
    rm -f "$log"
    return "$status"
}
# The benchmark's last stdout line must be its JSON (progress goes to stderr).
gpu_feed() {
    local out
    out=$("$PY" benchmarks/bench_gpu_feed.py) || return $?
    echo "$out"
    tail -n 1 <<<"$out" >"$report"
    "$PY" -c 'import json, sys; json.loads(open(sys.argv[1]).read()); print("kept in", sys.argv[1])' \
        "$report"
}
example() {
    local dir
    dir=$(mktemp -d)
    "$PY" examples/train_gpt.py --steps 30 --eval-every 10 --segments --packing bestfit \
        --checkpoint "$dir/gpt.pt" && rm -rf "$dir"
}
export PY report PYTHONPATH timeout_flag
export -f cuda_tests gpu_feed example
cuda_step "CUDA tests" 900 cuda_tests
step "device stage and mask tests" 600 "$PY" -m pytest tests/test_torch_device.py \
    tests/test_torch_masks.py -q -p no:cacheprovider -m "not cuda and not slow"
cuda_step "GPU feed benchmark" 900 gpu_feed
if ((!cuda)); then  # the benchmark's own code still runs: its CPU smoke run (report not kept)
    step "GPU feed benchmark, CPU smoke run" 300 "$PY" benchmarks/bench_gpu_feed.py --smoke
fi
step "start() benchmark" 300 "$PY" benchmarks/bench_start_early.py --rounds 3 --json
cuda_step "train_gpt example on CUDA" 600 example

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
if ((${#skipped[@]})); then
    echo "SKIPPED (no CUDA device): ${skipped[*]}; the other checks passed"
    [[ "${OWT_REQUIRE_CUDA:-}" == 1 ]] && exit 2
    exit 0
fi
echo "all GPU checks passed"
