#!/usr/bin/env bash
# What the GPU check (benchmarks/gpu_check.sh) carries to a machine that cannot reach PyPI, into .gpu/ (git-ignored):
# the Python wheels of polyrl's dependencies that the lent GPU machine's image lacks (it has torch, transformers,
# peft, accelerate, pyarrow), for its Python (3.12, x86-64 manylinux), in .gpu/wheels (~5 MB), and the commit of this
# checkout in .gpu/commit (the machine gets the tree without .git; the check records the commit it ran). Run it
# here, on any machine with PyPI, after the last commit; carry .gpu with the checkout. PY_VERSION=3.11 (say) fetches
# the wheels for another Python.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python && -z ${PYTHON:-} ]] && PY=.venv/bin/python
mkdir -p .gpu/wheels
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .gpu/wheels -r benchmarks/gpu/wheels.txt
commit=$(git rev-parse --short=12 HEAD)
[[ -n $(git status --porcelain --untracked-files=no) ]] && commit+=" + uncommitted changes"
echo "$commit" >.gpu/commit
du -sh .gpu/wheels
echo "commit: $commit"
