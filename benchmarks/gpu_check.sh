#!/usr/bin/env bash
# polyrl's GPU check: every check that only a GPU can answer, in one command on a lent GPU machine (10 minutes a
# command there, 15 minutes of device time a session, starts included): the part `lent`, held to GPU_CHECK_BUDGET
# seconds (480 by default, setup included). It downloads nothing.
#
#   bash benchmarks/gpu/fetch_wheels.sh                     # beforehand, here: .gpu/wheels (~5 MB) and .gpu/commit
#   GPU_CHECK_OUT=$OUT bash benchmarks/gpu_check.sh lent    # on the GPU machine, from the checkout carrying .gpu/
#   bash benchmarks/gpu_check.sh --plan                     # the parts, their checks and time limits
#
# GPU_CHECK_OUT (or, where it is unset, $OUT: the folder a lent machine sends back) names the directory every result
# is written to, each as soon as it exists: a part stopped at its limit still returns what it measured. Only files
# come back from a lent machine, at most 8 per call: a part writes PART.txt (its PASS/FAIL/SKIP lines), PART.log
# (each check's log, appended when it ends; a running check's log is NAME.log until then) and each check's results
# (run directories stay in a temporary folder). What the machine lacks of polyrl's pure-Python dependencies comes as
# wheels in .gpu/wheels (installed with --no-index into a temporary folder on PYTHONPATH); model weights are made on
# the device from configs in benchmarks/gpu/ (SmolLM2-135M's shape with its tokenizer; Qwen2.5-1.5B's shape for
# memory).
#
# Checks, each with a time limit, PASS, FAIL or SKIP on stdout and in PART.txt:
#   speed         generation (32 prompts x G=8, 128 new tokens) vs transformers' generate, one RL step vs TRL's
#                 GRPOTrainer, greedy tokens checked equal, CUDA graph captures and fallbacks
#                 (benchmarks/gpu_throughput.py; a fallback to eager decoding fails it)
#   packed        the packed forward against transformers' (greedy tokens, log-probs, gradients)
#   packed_train  a 5-step `polyrl train --config configs/smollm2.yaml` on SmolLM2-135M's shape
#   default       the embedded default job on the device: its held-out table beside the CPU's
#   memory        one update's peak memory and time at Qwen2.5-1.5B's shape, polyrl's settings vs TRL
#   fsdp          FSDP2 over nccl at world size 1 (`polyrl train --nproc 1`), short
#   vllm          vLLM parity and a vllm RL run: skipped, with the reason, without vLLM or on the CPU
#   hf_vlm        Hugging Face vision-language policies in bf16 autocast: SmolVLM-256M's shape and a small Qwen2-VL
#                 (Qwen2-VL-2B's widths, 4 + 4 layers), random weights made on the device; generation's log-probs
#                 against the training forward's, an SFT step and an RL step, their times and peak memory
#                 (benchmarks/vlm_check.py)
# Parts: `lent` runs speed alone first (its figures are timings), then the default job in the background (a learning
# outcome, not a timing: it shares the GPU) while packed, memory, fsdp and packed_train run one after another;
# `speed` and `rest` are the same checks one after another with more time each, for a machine held longer; `vllm`;
# `vlm` (the check hf_vlm), a call of its own held to VLM_BUDGET seconds (it makes its own models, not SmolLM2's):
#   GPU_CHECK_OUT=$OUT bash benchmarks/gpu_check.sh vlm     # on the GPU machine: one call of at most 180 s
# GPU_CHECK_DEVICE names the device (cuda, cuda:N or cpu; default cuda), checked by polyrl's device parser before
# any check runs. The exit code is the number of failed checks (2 for a setup that failed). GPU_CHECK_DEVICE=cpu
# runs the same commands on a CPU at small sizes (the plumbing, tested without a GPU: tests/test_gpu_check.py).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

COMMAND_LIMIT=600  # seconds one command may run on a lent machine (/work/.library/device/README.md)
BUDGET=${GPU_CHECK_BUDGET:-480}  # seconds one part may take, setup included: 2 minutes of margin under the limit
SETUP_LIMIT=90  # wheels, imports, the device, the model files (a fresh machine reads torch from a cold disk)
# each part's checks in order, NAME:SECONDS; NAME:SECONDS& starts in the background and runs beside the checks after
# it, to the end of the part (tests/test_gpu_check.py holds setup plus the part's longest path to the budget)
declare -A PARTS=(
    [lent]="speed:180 default:200& packed:50 memory:80 fsdp:35 packed_train:35"
    [speed]="speed:240 packed:60 packed_train:90"
    [rest]="default:180 memory:120 fsdp:90"
    [vllm]="vllm:120"
    [vlm]="hf_vlm:80"
)
ORDER=(lent speed rest vllm vlm)
VLM_BUDGET=170  # `vlm` alone: setup and its check, 10 s under the 180 s call it is documented for (docs/gpu.md)

if [[ ${1:-} == --plan ]]; then  # what tests/test_gpu_check.py holds to the limit
    echo "command_limit $COMMAND_LIMIT"
    echo "budget $BUDGET"
    echo "setup $SETUP_LIMIT"
    echo "part_budget vlm $VLM_BUDGET"
    for part in "${ORDER[@]}"; do
        for item in ${PARTS[$part]}; do
            seconds=${item##*:}
            echo "check $part ${item%%:*} ${seconds%&}$([[ $item == *'&' ]] && echo ' background')"
        done
    done
    exit 0
fi
WANTED=("$@")
[[ ${#WANTED[@]} -eq 0 ]] && WANTED=(lent vllm)  # every check, once
for part in "${WANTED[@]}"; do
    if [[ -z ${PARTS[$part]+x} ]]; then
        echo "gpu_check: unknown part '$part'; give one or more of: ${ORDER[*]} (or --plan)" >&2
        exit 2
    fi
done
[[ ${WANTED[*]} == vlm && -z ${GPU_CHECK_BUDGET:-} ]] && BUDGET=$VLM_BUDGET
RESULTS=${GPU_CHECK_OUT:-${OUT:-}}
if [[ -z $RESULTS ]]; then
    echo "gpu_check: name the directory for the results: GPU_CHECK_OUT=DIR (on a lent GPU machine, \$OUT)" >&2
    exit 2
fi

PY=${PYTHON:-python3}
[[ -x .venv/bin/python && -z ${PYTHON:-} ]] && PY=.venv/bin/python
[[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # absolute: some checks run elsewhere
DEVICE=${GPU_CHECK_DEVICE:-cuda}
# the CPU run checks the script's plumbing, not the GPU's limits: on a shared CPU its time limits are this many
# times the GPU's (GPU_CHECK_CPU_SLOWER, 4 by default; the limits above are what a GPU call is held to)
SLOWER=1
[[ $DEVICE == cpu ]] && SLOWER=${GPU_CHECK_CPU_SLOWER:-4}
BUDGET=$((BUDGET * SLOWER)) SETUP_LIMIT=$((SETUP_LIMIT * SLOWER))
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
left() { echo $((START + BUDGET - SECONDS)); }
setup_left() { local s=$((START + SETUP_LIMIT - SECONDS)); echo $((s > 1 ? s : 1)); }

# -- dependencies: the wheels this checkout carries, into a private folder ----------------------------------
SITE=$WORK/site
export PYTHONPATH=$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}
if ! "$PY" -c "import polyrl.train.trainer, trl" 2>/dev/null && compgen -G ".gpu/wheels/*.whl" >/dev/null; then
    timeout "$(setup_left)" "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .gpu/wheels/*.whl \
        || { echo "gpu_check: installing .gpu/wheels failed (exit $?)" >&2; exit 2; }
fi
if ! timeout "$(setup_left)" "$PY" -c "import polyrl.train.trainer" 2>"$WORK/import.log"; then
    echo "gpu_check: polyrl does not import here: $(tail -1 "$WORK/import.log"); fetch the wheels with" \
        "benchmarks/gpu/fetch_wheels.sh on a machine with PyPI and carry .gpu/" >&2
    exit 2
fi
# -- the device: polyrl's own parser, before any check runs (a name it does not know, a device this machine lacks
# or one the checks cannot use is one line and exit 2). Every check is then told `cuda`, with CUDA_VISIBLE_DEVICES
# narrowed to the device named, so that each one (torchrun's rank, TRL's accelerate, vLLM) runs on the one reported.
DEVICE_LINE=$(timeout "$(setup_left)" "$PY" benchmarks/gpu/check_device.py "$DEVICE") || exit 2
read -r DEVICE INDEX PLACED <<<"$DEVICE_LINE"
if [[ $DEVICE == cuda ]]; then
    if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
        IFS=, read -ra VISIBLE <<<"$CUDA_VISIBLE_DEVICES"
        export CUDA_VISIBLE_DEVICES=${VISIBLE[$INDEX]}
    else
        export CUDA_VISIBLE_DEVICES=$INDEX
    fi
fi
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
# the commit: git's where there is one, else the one fetch_wheels.sh wrote beside the wheels (a lent machine gets
# the tree without .git)
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null) \
    && [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && COMMIT+=" + uncommitted changes"
[[ -z $COMMIT ]] && COMMIT="$(cat .gpu/commit 2>/dev/null || echo unknown) (from .gpu/commit)"
GPU_NAME=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)

# -- sizes: the real ones on CUDA, small ones for the CPU run of the script itself ---------------------------
if [[ $DEVICE == cuda ]]; then
    DEFAULT_JOB=(); SPEED=(--prompts 32 --group-size 8 --new-tokens 128); SHAPE=()
    MEMORY=(--model "$WORK/qwen1.5b" --group-size 8 --length 1024 --prompt-length 64)
    PACKED=(); SMALL_RUN=(sft.steps=5 rl.steps=5 eval.problems_per_task=5); VLM=()
else  # the plumbing on a CPU: SmolLM2's family at a test's width (make_model.py --small), everything small
    DEFAULT_JOB=(sft.steps=20 rl.steps=3 rl.prompts_per_step=4 eval.problems_per_task=5)
    SPEED=(--prompts 2 --group-size 2 --new-tokens 8 --steps 1 --repeats 1 --greedy-check 2 --greedy-tokens 4)
    MEMORY=(--group-size 4 --length 64 --prompt-length 16 --hidden 64 --layers 1); SHAPE=(--layers 2 --small)
    PACKED=(--prompts 1 --group-size 2 --max-new-tokens 4)
    SMALL_RUN=(sft.steps=1 rl.steps=1 rl.prompts_per_step=2 rl.group_size=2 rl.max_new_tokens=8 eval.problems_per_task=1)
    VLM=(--small --prompts 2 --group-size 2 --new-tokens 4)
fi
make_models() {
    timeout "$(setup_left)" "$PY" benchmarks/gpu/make_model.py smollm2-135m "$WORK/smollm2" --weights \
        --device "$DEVICE" "${SHAPE[@]}" >/dev/null 2>"$WORK/make_model.log" \
        && "$PY" benchmarks/gpu/make_model.py qwen2.5-1.5b "$WORK/qwen1.5b" >/dev/null 2>>"$WORK/make_model.log"
}
needs_models=false  # SmolLM2's and Qwen2.5's: not for `vlm` (it makes its own), nor `vllm` on a CPU (it only skips)
for part in "${WANTED[@]}"; do
    [[ $part == vlm || ($part == vllm && $DEVICE != cuda) ]] || needs_models=true
done
if $needs_models && ! make_models; then
    echo "gpu_check: making the models failed: $(tail -1 "$WORK/make_model.log")" >&2
    exit 2
fi
SETUP_S=$((SECONDS - START))
if ((SETUP_S > SETUP_LIMIT)); then
    echo "gpu_check: setup took $SETUP_S s, over its $SETUP_LIMIT s" >&2
    exit 2
fi

failed=0
PART=
BACKGROUND=()
say() { echo "$@" | tee -a "$RESULTS/$PART.txt"; }
check() {  # check NAME: run cmd_NAME within its limit and the part's budget, log to NAME.log, say PASS/FAIL/SKIP
    local name=$1 limit
    limit=$(limit_of "$name")
    ((limit > $(left))) && limit=$(left)
    if ((limit < 10)); then
        say "SKIP $name: this call's budget ($BUDGET s) is spent"
        return
    fi
    local t0=$SECONDS log=$RESULTS/$name.log status=0 CMD
    command_of "$name"
    timeout "$limit" "${CMD[@]}" >"$log" 2>&1 || status=$?
    if ((status == 0)); then
        say "PASS $name ($((SECONDS - t0)) s)"
    else
        say "FAIL $name (exit $status, $((SECONDS - t0)) s, limit $limit s): see $PART.log"
        tail -5 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
    # one log file per part (a call sends back 8 files): this check's, under a header, then its own file goes
    { echo "=== $name"; cat "$log"; echo; } >>"$RESULTS/$PART.log" && rm -f "$log"
}
check_in_background() {  # check_in_background NAME: `check` beside what follows; `collect` waits for it
    (
        failed=0
        check "$1"
        exit "$failed"
    ) &
    BACKGROUND+=($!)
}
collect() {
    local pid
    for pid in "${BACKGROUND[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    BACKGROUND=()
}
limit_of() {
    local item
    for item in ${PARTS[$PART]}; do
        [[ ${item%%:*} == "$1" ]] && { item=${item##*:}; echo $((${item%&} * SLOWER)); }
    done
}
show() {  # the results a part wrote, at the end of its output
    local f
    for f in "$@"; do [[ -f $RESULTS/$f ]] && { echo "--- $f"; cat "$RESULTS/$f"; echo; }; done
}
command_of() {  # command_of NAME: the check's command, in CMD
    case $1 in
    speed) CMD=("$PY" benchmarks/gpu_throughput.py --model "$WORK/smollm2" --device "$DEVICE" "${SPEED[@]}"
        --out "$RESULTS/speed.json") ;;
    packed) CMD=("$PY" benchmarks/packed_check.py --model "$WORK/smollm2" --device "$DEVICE" "${PACKED[@]}"
        --out "$RESULTS/packed_check.json") ;;
    packed_train) CMD=("$PY" -m polyrl train --config configs/smollm2.yaml --run-dir "$WORK/packed"
        model.path="$WORK/smollm2" device="$DEVICE" progress=false tensorboard=false "${SMALL_RUN[@]}") ;;
    default) CMD=("$PY" benchmarks/default_job.py --run-dir "$WORK/default" --out "$RESULTS/default.md"
        --commit "$COMMIT" device="$DEVICE" "${DEFAULT_JOB[@]}") ;;
    # memory: a setting that failed (a "| failed |" row) fails the check
    memory) CMD=(bash -c "cd benchmarks && '$PY' memory.py ${MEMORY[*]} --only chunked,all,trl --markdown \
        --device $DEVICE > '$RESULTS/memory.md' && ! grep -q '| failed |' '$RESULTS/memory.md'") ;;
    fsdp) CMD=("$PY" -m polyrl train --config configs/smollm2.yaml --nproc 1 --run-dir "$WORK/fsdp"
        model.path="$WORK/smollm2" device="$DEVICE" model.autocast=none progress=false tensorboard=false
        "${SMALL_RUN[@]}") ;;
    hf_vlm) CMD=("$PY" benchmarks/vlm_check.py --device "$DEVICE" --work "$WORK/vlm" "${VLM[@]}"
        --out "$RESULTS/vlm_check.json") ;;
    vllm) CMD=("$PY" benchmarks/vllm_check.py --model "$WORK/smollm2" --steps 5 --prompts 32 --group-size 8
        --out "$RESULTS/vllm_check.json") ;;
    esac
}
declare -A RESULT_FILES=(
    [speed]=speed.json [packed]=packed_check.json [default]=default.md [memory]=memory.md [vllm]=vllm_check.json
    [hf_vlm]=vlm_check.json
)

run_part() {  # the part's checks in order, the background ones beside those after them; then its results
    local item name shown=()
    for item in ${PARTS[$PART]}; do
        name=${item%%:*}
        [[ -n ${RESULT_FILES[$name]:-} ]] && shown+=("${RESULT_FILES[$name]}")
        if [[ $name == vllm && $DEVICE != cuda ]]; then
            say "SKIP vllm: vLLM runs on CUDA only (GPU_CHECK_DEVICE=$DEVICE)"
        elif [[ $name == vllm ]] && ! "$PY" -c "import vllm" 2>/dev/null; then
            say "SKIP vllm: vLLM is not installed here (its CUDA wheel cannot be carried; pip install 'polyrl[vllm]')"
        elif [[ $item == *'&' ]]; then
            check_in_background "$name"
        else
            check "$name"
        fi
    done
    collect
    show "${shown[@]}"
}

for PART in "${WANTED[@]}"; do
    : >"$RESULTS/$PART.txt"
    say "gpu_check $PART: $PLACED${GPU_NAME:+ [$GPU_NAME]}, commit $COMMIT, $(date -u '+%F %H:%M') UTC," \
        "setup $SETUP_S s"
    run_part
done
say "gpu_check: $failed check(s) failed; results in $RESULTS/ ($((SECONDS - START)) s)"
exit "$failed"
