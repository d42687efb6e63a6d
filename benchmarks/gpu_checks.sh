#!/usr/bin/env bash
# The GPU checks of issue 37, unattended, on a machine with a CUDA device (one GPU, 16 cores:
# about five minutes), from a fresh clone: it installs what it needs first (the machine's own
# CUDA build of torch is kept: pip only adds what is missing; at most 30 minutes; into a venv
# that sees the machine's packages, ${TMPDIR:-/tmp}/owt-gpu-venv, where the Python is
# "externally managed" (PEP 668); OWT_NO_INSTALL=1 skips this):
#
#     bash benchmarks/gpu_checks.sh            # PYTHON=/path/to/python to pick the interpreter
#
# 0. a preflight: what compiled FlexAttention needs (torch >= 2.6, triton, a C compiler,
#    Python.h), each one missing named;
# 1. the tests of CUDA code paths (pytest -m cuda: the device stage's pinned ring and side
#    stream, FlexAttention's block mask compiled on the GPU), none of them may be skipped;
# 2. the device stage's tests on the CPU, and the block mask's, none of them skipped either;
# 3. benchmarks/bench_gpu_feed.py: a small GPT trained from best-fit batches with and without
#    the device stage (8 rows of 1024 a step: within a GPU of 12 GB), and the first batch with
#    and without start(): one JSON line, checked and kept in $OWT_GPU_REPORT (default
#    gpu_feed.json);
# 4. benchmarks/bench_start_early.py: Loader.batches' first batch after 3 s with and without
#    start() (on the CPU's workers);
# 5. examples/train_gpt.py for a few steps on the GPU (it uses the device stage there).
# Nothing is downloaded but the packages (the corpora are generated). Every step has a time
# limit; every result is printed; the exit status is 1 if any step failed. Without a CUDA
# device the CUDA steps (0, 1, 3 and 5) are skipped, each named, and the others run (3 as its
# CPU smoke run): the status is then 0 if they passed, or 2 with OWT_REQUIRE_CUDA=1, so that a
# torch without CUDA is not taken for a pass. Where an NVIDIA GPU is visible (the driver's
# /proc/driver/nvidia/gpus, or nvidia-smi -L) OWT_REQUIRE_CUDA is 1 unless the caller set it
# (OWT_REQUIRE_CUDA=0 lets the CUDA steps be skipped there).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
report=${OWT_GPU_REPORT:-gpu_feed.json}
failed=()

gpu_visible() {  # an NVIDIA GPU the driver knows of, whatever torch makes of it
    compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null && return 0
    command -v nvidia-smi >/dev/null || return 1
    local listed  # (read whole: grep -q on a pipe would fail it by SIGPIPE under pipefail)
    listed=$(timeout 60 nvidia-smi -L 2>/dev/null)
    grep -q '^GPU ' <<<"$listed"
}
if [[ -z "${OWT_REQUIRE_CUDA+set}" ]] && gpu_visible; then
    export OWT_REQUIRE_CUDA=1
    echo "an NVIDIA GPU is visible here: OWT_REQUIRE_CUDA=1, the CUDA steps may not be skipped" \
        "(status 2 if they are; set OWT_REQUIRE_CUDA=0 to allow it)"
fi

install() {  # not the whole `test` extra (S3, GCS, Ray, datasets servers): what these import
    local log status
    log=$(mktemp)
    timeout --kill-after=30 1800 "$PY" -m pip install --quiet -e '.[torch,tokenize]' \
        'pytest>=7.4' 'pytest-timeout>=2.2' 'hypothesis>=6.100' 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    if ((status == 124)); then echo "pip install: over its 1800 s"; fi
    grep -q "externally-managed-environment" "$log" && status=99
    rm -f "$log"
    return "$status"
}
if [[ "${OWT_NO_INSTALL:-}" != 1 ]]; then
    install
    status=$?
    if ((status == 99)); then  # PEP 668: pip may not install into this Python; a venv may
        venv="${TMPDIR:-/tmp}/owt-gpu-venv"
        echo "$PY is externally managed (PEP 668): installing into $venv instead (a venv with" \
            "its packages: its CUDA torch)"
        "$PY" -m venv --system-site-packages "$venv" || {
            echo "no venv could be made in $venv (on Debian: apt-get install python3-venv)"
            exit 3
        }
        PY="$venv/bin/python"
        install
        status=$?
    fi
    ((status == 0)) || { echo "the install failed ($status)"; exit 3; }
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
    "$PY" -c 'import torch; print("device:", torch.cuda.get_device_name(0), "| torch",
        torch.__version__, "| torch.version.cuda", torch.version.cuda)'
elif ! "$PY" -c 'import torch' 2>/dev/null; then
    cuda=0
    why="torch does not import in $PY (install the project: unset OWT_NO_INSTALL)"
    echo "$why: the CUDA steps are skipped, the others run"
else
    cuda=0
    why="no CUDA device: torch.cuda.is_available() is False ($("$PY" -c 'import torch
cuda = torch.version.cuda
print(f"torch {torch.__version__}, torch.version.cuda {cuda}" + ("" if cuda else ": no CUDA build"))
'))"
    echo "$why: the CUDA steps are skipped, the others run"
fi
# pytest-timeout bounds each test (installed above; with OWT_NO_INSTALL=1 maybe not: the step's
# own limit bounds the run then).
timeout_flag=$("$PY" -c 'import pytest_timeout' 2>/dev/null && echo "--timeout=600")
cuda_step() {  # a step of the GPU's: run, or named as skipped
    if ((cuda)); then step "$@"; else echo "=== $1: SKIPPED ($why)"; skipped+=("$1"); fi
}

# What compiled FlexAttention needs (torch.compile(create_block_mask), flex_attention's Triton
# kernels), named before the tests meet it as a long traceback.
preflight() {
    "$PY" -c 'import os, re, shlex, shutil, sys, sysconfig
import torch
missing = []
if torch.cuda.get_device_capability() < (7, 0):
    name, capability = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
    missing.append(f"a GPU of compute capability 7.0 or more for Triton, not {name} {capability}")
version = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
if version < (2, 6):
    missing.append(f"torch >= 2.6 (torch.compile(create_block_mask)), not {torch.__version__}")
try:
    import triton
    print("triton", triton.__version__)
except ImportError as exc:
    missing.append(f"triton ({exc}: torch CUDA wheels bring it; else pip install triton)")
cc = os.environ.get("CC")
if cc:
    found = shutil.which(shlex.split(cc)[0]) if shlex.split(cc) else None
    if found is None:
        missing.append(f"the C compiler of CC={cc!r}: not on PATH")
else:
    found = next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)
    if found is None:
        missing.append("a C compiler (CC, or cc, gcc or clang on PATH: apt-get install gcc)")
print("C compiler", found)
include = sysconfig.get_paths()["include"]
if not os.path.isfile(os.path.join(include, "Python.h")):
    missing.append(f"Python.h in {include} (Python headers: apt-get install python3-dev)")
for what in missing:
    print("missing for compiled FlexAttention:", what)
sys.exit(1 if missing else 0)'
}
# pytest, every test of which must run: -rs lists skips, and a SKIPPED line (grep) is a failure
# (a module skipped whole, e.g. torchdata missing, is no pass).
none_skipped() {
    local log status
    log=$(mktemp)
    "$PY" -m pytest -rs -q -p no:cacheprovider $timeout_flag "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    if grep -q "SKIPPED" "$log"; then echo "a test was skipped: each must run here"; status=1; fi
    rm -f "$log"
    return "$status"
}
# The benchmark's last stdout line must be its JSON (progress goes to stderr): checked against
# the sizes asked for (8 rows of 1024 a step: the logits of a vocabulary of 50304 fit 12 GB).
gpu_feed() {
    local out batch=8 steps=150 warmup=20
    out=$("$PY" benchmarks/bench_gpu_feed.py --batch-size "$batch" --steps "$steps" \
        --warmup "$warmup") || return $?
    echo "$out"
    tail -n 1 <<<"$out" >"$report"
    "$PY" -c 'import json, sys
report = json.loads(open(sys.argv[1]).read())
asked = zip(("batch_size", "steps", "warmup"), map(int, sys.argv[2:]))
wrong = [f"{name} {report[name]}, not {value}" for name, value in asked if report[name] != value]
for feed in ("plain", "stage"):
    figures = report[feed]
    if not (figures["tokens_per_s"] > 0 and 0 <= figures["data_wait_share"] <= 1):
        wrong.append(f"{feed} {figures}")
if report["timer"] != "cuda-events":
    wrong.append("timer " + report["timer"] + ", not cuda-events")
print("precision", report["precision"] + "; kept in", sys.argv[1])
for what in wrong:
    print("not as asked:", what)
sys.exit(1 if wrong else 0)' "$report" "$batch" "$steps" "$warmup"
}
example() {
    local dir
    dir=$(mktemp -d)
    "$PY" examples/train_gpt.py --steps 30 --eval-every 10 --segments --packing bestfit \
        --checkpoint "$dir/gpt.pt" && rm -rf "$dir"
}
export PY report PYTHONPATH timeout_flag
export -f preflight none_skipped gpu_feed example
cuda_step "CUDA preflight" 120 preflight
cuda_step "CUDA tests" 900 none_skipped tests/test_torch_device.py tests/test_torch_masks.py \
    -m cuda
step "device stage and mask tests" 600 none_skipped tests/test_torch_device.py \
    tests/test_torch_masks.py -m "not cuda and not slow"
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
    if [[ "${OWT_REQUIRE_CUDA:-}" == 1 ]]; then
        echo "OWT_REQUIRE_CUDA=1: the CUDA steps may not be skipped (status 2)"
        exit 2
    fi
    exit 0
fi
echo "all GPU checks passed"
