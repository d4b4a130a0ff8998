"""The mixture search's driver: proxy runs from one shared SFT warm start, then the RegMix choice.

The math (candidate mixtures, ridge fit, choice) is in :mod:`polyrl.curriculum.mixture_search`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from polyrl.curriculum.mixture_regression import candidate_mixtures, choose_mixture, fit_ridge
from polyrl.errors import UserError
from polyrl.experiments.curriculum import read_experiment_config, train_from_warm_start
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer


def search_mixture(
    config_path: str | Path,
    candidates: int = 6,
    proxy_steps: int = 10,
    out: str | Path = "runs/mixture_search",
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the proxy runs of a mixture search and write ``out/mixture.yaml``; returns what it wrote."""
    if candidates < 2:
        raise UserError(f"--candidates must be at least 2, got {candidates}")
    if proxy_steps < 1:
        raise UserError(f"--proxy-steps must be at least 1, got {proxy_steps}")
    out = Path(out)
    raw, _ = read_experiment_config(config_path)  # an experiment file's strategies: are not used here
    base = load_config(None, base={**raw, "run_dir": str(out / "sft"), "seed": seed, "progress": False})
    tasks = [t.name for t in base.tasks]
    rng = np.random.default_rng(seed)
    mixtures = candidate_mixtures(len(tasks), candidates, rng)
    sft = out / "sft"
    if not (sft / "eval" / "after_sft.json").exists():
        log(f"SFT warm start → {sft}")
        sft_config = base.model_copy(update={"rl": base.rl.model_copy(update={"enabled": False})})
        Trainer(sft_config, resume=(sft / "config.yaml").exists()).run()
    scores = []
    for i, w in enumerate(mixtures):
        cfg = base.model_copy(
            update={
                "run_dir": str(out / f"proxy{i}"),
                "sampler": base.sampler.model_copy(
                    update={"name": "weighted", "options": {"weights": dict(zip(tasks, w.tolist()))}}
                ),
                "rl": base.rl.model_copy(update={"steps": proxy_steps}),
            }
        )
        log(f"proxy run {i + 1}/{len(mixtures)}: " + ", ".join(f"{t} {x:.2f}" for t, x in zip(tasks, w)))
        results = train_from_warm_start(cfg, sft).parts.run_dir.eval_file("after_rl")
        scores.append(json.loads(results.read_text())["mean"]["accuracy"])
    coef, intercept = fit_ridge(mixtures, np.array(scores))
    best, predicted = choose_mixture(coef, intercept, rng)
    weights = {t: round(float(x), 4) for t, x in zip(tasks, best)}
    result = {
        "sampler": {"name": "weighted", "options": {"weights": dict(weights)}},
        "weights": weights,
        "predicted_score": predicted,
        "proxy_runs": [{"weights": dict(zip(tasks, w.tolist())), "score": s} for w, s in zip(mixtures, scores)],
        "ridge": {"coef": dict(zip(tasks, coef.tolist())), "intercept": intercept},
        "file": str(out / "mixture.yaml"),
    }
    (out / "mixture.yaml").write_text(yaml.safe_dump(result, sort_keys=False))
    return result
