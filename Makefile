# The two Quick start commands: `make train` and `make test`. Both set up .venv first.
.PHONY: setup train test bench
setup:
	@./scripts/setup.sh

train: setup
	.venv/bin/polyrl train

test: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/python -m pytest

bench: setup
	.venv/bin/python benchmarks/tasks_throughput.py
