#!/usr/bin/env bash
# The Python wheels the GPU check installs on a machine that cannot reach PyPI (benchmarks/gpu_check.sh): polyrl's
# dependencies that the lent GPU machine's image lacks (it has torch, transformers, peft, accelerate, pyarrow), for
# its Python (3.12, x86-64 manylinux), into .gpu/wheels (git-ignored, ~5 MB). Run it here, on any machine with PyPI;
# carry .gpu with the checkout. PY_VERSION=3.11 (say) fetches them for another Python.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python && -z ${PYTHON:-} ]] && PY=.venv/bin/python
mkdir -p .gpu/wheels
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .gpu/wheels -r benchmarks/gpu/wheels.txt
du -sh .gpu/wheels
