#!/usr/bin/env bash
# polyrl's GPU check: one command on a bare CUDA machine, no network, about 8 minutes on one GPU.
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine, from a checkout that carries .gpu/wheels
#   bash benchmarks/gpu/fetch_wheels.sh     # beforehand, on any machine with PyPI (writes .gpu/wheels, ~5 MB)
#
# It downloads nothing. What the machine lacks of polyrl's pure-Python dependencies comes as Python wheels in
# .gpu/wheels (installed with --no-index into a folder on PYTHONPATH, nothing outside it touched); model weights
# are made from configs in benchmarks/gpu/ (SmolLM2-135M's shape with its tokenizer; Qwen2.5-1.5B's shape for
# memory). Checks, each with a time limit, PASS or FAIL on stdout, logs and results in $GPU_CHECK_OUT (default
# gpu_check/):
#   default   the embedded default job on CUDA (`polyrl train device=cuda`): its held-out table, to compare with
#             the CPU's (README); tiny model, full SFT + RL
#   packed    the packed forward against transformers' on CUDA (greedy tokens, log-probs, gradients) on
#             SmolLM2-135M's shape, then a 5-step `polyrl train` on it
#   fsdp      FSDP2 over nccl at world size 1: `polyrl train --nproc 1 device=cuda`, short
#   memory    one update's peak memory and time at Qwen2.5-1.5B's shape, polyrl's settings vs TRL GRPOTrainer
#   speed     generation (32 prompts × G=8, 128 new tokens) vs transformers' generate, one RL step vs TRL's
#             GRPOTrainer, greedy tokens checked equal (benchmarks/gpu_throughput.py)
#   vllm      vLLM parity and a vllm RL run (benchmarks/vllm_check.py): skipped, with the reason, without vLLM
# GPU_CHECK_DEVICE names the device (cuda, cuda:N or cpu; default cuda), checked by polyrl's device parser before
# any check runs. The exit code is the number of failed checks. GPU_CHECK_DEVICE=cpu runs the same commands on a
# CPU at small sizes (the plumbing, tested without a GPU; no nccl: the fsdp check uses gloo; no vLLM).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
[[ -x .venv/bin/python && -z ${PYTHON:-} ]] && PY=.venv/bin/python
[[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # absolute: some checks run elsewhere
OUT=${GPU_CHECK_OUT:-gpu_check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
DEVICE=${GPU_CHECK_DEVICE:-cuda}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

# -- dependencies: the wheels this checkout carries, into a private folder ----------------------------------
SITE=$WORK/site
export PYTHONPATH=$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}
if ! "$PY" -c "import polyrl.train.trainer, trl" 2>/dev/null && compgen -G ".gpu/wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .gpu/wheels/*.whl || exit 2
fi
if ! "$PY" -c "import polyrl.train.trainer" 2>"$OUT/import.log"; then
    echo "gpu_check: polyrl does not import here (see $OUT/import.log); fetch the wheels with" \
        "benchmarks/gpu/fetch_wheels.sh on a machine with PyPI and carry .gpu/" >&2
    exit 2
fi
# -- the device: polyrl's own parser, before any check runs (a name it does not know, a device this machine lacks
# or one the checks cannot use is one line and exit 2). Every check is then told `cuda`, with CUDA_VISIBLE_DEVICES
# narrowed to the device named, so that each one (torchrun's rank, TRL's accelerate, vLLM) runs on the one reported.
DEVICE_LINE=$("$PY" benchmarks/gpu/check_device.py "$DEVICE") || exit 2
read -r DEVICE INDEX PLACED <<<"$DEVICE_LINE"
if [[ $DEVICE == cuda ]]; then
    if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
        IFS=, read -ra VISIBLE <<<"$CUDA_VISIBLE_DEVICES"
        export CUDA_VISIBLE_DEVICES=${VISIBLE[$INDEX]}
    else
        export CUDA_VISIBLE_DEVICES=$INDEX
    fi
fi
echo "gpu_check: $PLACED $(date -u +%F)"

# -- sizes: the real ones on CUDA, small ones for the CPU run of the script itself ---------------------------
if [[ $DEVICE == cuda ]]; then
    DEFAULT_JOB=(); SPEED=(--prompts 32 --group-size 8 --new-tokens 128); LAYERS=()
    MEMORY=(--model "$WORK/qwen1.5b" --group-size 8 --length 1024 --prompt-length 64)
    PACKED=(); SMALL_RUN=(sft.steps=5 rl.steps=5 eval.problems_per_task=5)
else  # the plumbing on a CPU: SmolLM2's shape cut to 2 layers, everything small
    DEFAULT_JOB=(sft.steps=20 rl.steps=3 rl.prompts_per_step=4 eval.problems_per_task=5)
    SPEED=(--prompts 2 --group-size 2 --new-tokens 8 --steps 1 --repeats 1 --greedy-check 2 --greedy-tokens 4)
    MEMORY=(--group-size 4 --length 64 --prompt-length 16 --hidden 64 --layers 1); LAYERS=(--layers 2)
    PACKED=(--prompts 1 --group-size 2 --max-new-tokens 4)
    SMALL_RUN=(sft.steps=1 rl.steps=1 rl.prompts_per_step=2 rl.group_size=2 rl.max_new_tokens=8 eval.problems_per_task=1)
fi
"$PY" benchmarks/gpu/make_model.py smollm2-135m "$WORK/smollm2" --weights "${LAYERS[@]}" >/dev/null || exit 2
"$PY" benchmarks/gpu/make_model.py qwen2.5-1.5b "$WORK/qwen1.5b" >/dev/null || exit 2

failed=0
check() {  # check NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, print PASS/FAIL
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
        echo "PASS $name ($((SECONDS - t0)) s)"
    else
        echo "FAIL $name (exit $?, $((SECONDS - t0)) s): see $OUT/$name.log"
        tail -5 "$OUT/$name.log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

rm -rf "$OUT/default" "$OUT/packed" "$OUT/fsdp"
check default 240 "$PY" benchmarks/default_job.py --run-dir "$OUT/default" --out "$OUT/default.md" \
    device="$DEVICE" "${DEFAULT_JOB[@]}"
check packed 60 "$PY" benchmarks/packed_check.py --model "$WORK/smollm2" --device "$DEVICE" "${PACKED[@]}" \
    --out "$OUT/packed_check.json"
check packed_train 60 "$PY" -m polyrl train --config configs/smollm2.yaml --run-dir "$OUT/packed" \
    model.path="$WORK/smollm2" device="$DEVICE" progress=false tensorboard=false "${SMALL_RUN[@]}"
check fsdp 90 "$PY" -m polyrl train --config configs/smollm2.yaml --nproc 1 --run-dir "$OUT/fsdp" \
    model.path="$WORK/smollm2" device="$DEVICE" model.autocast=none progress=false tensorboard=false "${SMALL_RUN[@]}"
check memory 90 bash -c "cd benchmarks && '$PY' memory.py ${MEMORY[*]} --only chunked,all,trl --markdown \
    --device $DEVICE > '$OUT/memory.md' && ! grep -q '| failed |' '$OUT/memory.md'"  # a setting that failed fails the check
check speed 120 "$PY" benchmarks/gpu_throughput.py --model "$WORK/smollm2" --device "$DEVICE" "${SPEED[@]}" \
    --out "$OUT/speed.json"
if [[ $DEVICE != cuda ]]; then
    echo "SKIP vllm: vLLM runs on CUDA only (GPU_CHECK_DEVICE=$DEVICE)"
elif "$PY" -c "import vllm" 2>/dev/null; then
    check vllm 120 "$PY" benchmarks/vllm_check.py --model "$WORK/smollm2" --steps 5 --prompts 32 --group-size 8 \
        --out "$OUT/vllm_check.json"
else
    echo "SKIP vllm: vLLM is not installed here (its CUDA wheel cannot be carried; pip install 'polyrl[vllm]')"
fi
for f in default.md memory.md packed_check.json speed.json; do
    [[ -f $OUT/$f ]] && { echo "--- $f"; cat "$OUT/$f"; }
done
echo "gpu_check: $failed check(s) failed; results in $OUT/"
exit "$failed"
