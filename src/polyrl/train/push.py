"""``polyrl push RUN_DIR REPO_ID``: a run's final model (or its LoRA adapter) with its card, config and tokenizer,
to the Hugging Face Hub through ``huggingface_hub``'s upload API.

What goes up is first staged in a temporary folder — the model directory's files (hard links where the file
system allows, else copies), its card pointed at the repository — and that folder is uploaded in one commit
(``HfApi.create_repo`` then ``HfApi.upload_folder``). Offline (``HF_HUB_OFFLINE``) or without a token
(``HF_TOKEN`` or ``hf auth login``), it stops in one line before anything is staged.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from polyrl.errors import UserError
from polyrl.policy.hub import is_hub_id, offline
from polyrl.policy.lora import ADAPTER_CONFIG, ADAPTER_DIR
from polyrl.policy.model_files import one_line
from polyrl.train.model_card import CARD, card_for_repo


@dataclass(frozen=True)
class Pushed:
    """What ``push`` sent: the repository, the local folder it came from, the files, the commit's address."""

    repo_id: str
    source: Path
    files: list[str]
    url: str


def model_directory(path: Path) -> Path:
    """The model a push sends: ``RUN_DIR/final_model`` for a run directory, or ``path`` itself when it is a saved
    model directory (``RUN_DIR/sft_model``)."""
    if (path / "config.json").is_file():
        return path
    final = path / "final_model"
    if (final / "config.json").is_file():
        return final
    if (path / "config.yaml").is_file():
        raise UserError(
            f"run {str(path)!r} has no final_model (it has not finished RL): push one of its model directories, "
            f"e.g. polyrl push {path / 'sft_model'} REPO_ID"
        )
    raise UserError(f"{str(path)!r} is neither a polyrl run directory nor a saved model directory")


def check_hub_access() -> str:
    """The token a push uploads with; one line when the Hub may not be reached or no token is set."""
    from huggingface_hub import get_token

    if offline():
        raise UserError("polyrl push needs the Hugging Face Hub, and HF_HUB_OFFLINE is set: unset it to push")
    token = get_token()
    if not token:
        raise UserError(
            "polyrl push needs a Hugging Face token with write access: set HF_TOKEN or run `hf auth login`"
        )
    return token


def stage(model_dir: Path, out: Path, repo_id: str, adapter_only: bool) -> list[str]:
    """The files of ``model_dir`` (or of its ``adapter/``) in ``out``, cards pointed at ``repo_id``; their paths."""
    source = model_dir / ADAPTER_DIR if adapter_only else model_dir
    if adapter_only and not (source / ADAPTER_CONFIG).is_file():
        raise UserError(f"{str(model_dir)!r} holds no LoRA adapter (the run trained every weight): push it whole")
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
    for file in files:
        rel = file.relative_to(source)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if file.name == CARD:
            nested = ADAPTER_DIR if rel.parts[0] == ADAPTER_DIR else None
            target.write_text(card_for_repo(file.read_text(), repo_id, subfolder=nested))
            continue
        try:
            os.link(file, target)
        except OSError:  # another file system, or links not allowed: a copy
            shutil.copy2(file, target)
    return [str(f.relative_to(source)) for f in files]


def _warn_local_base(adapter_config: Path) -> None:
    """A pushed adapter names its base; a local path there loads only on machines that have that directory."""
    try:
        base = json.loads(adapter_config.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return
    if base is None or Path(base).is_absolute():
        where = "polyrl's embedded model" if base is None else f"the local directory {base}"
        warnings.warn(
            f"the adapter's base is {where}, not a Hub id: it loads only where that base is (the merged model "
            "in the same run has no such limit)",
            stacklevel=2,
        )


def push(path: Path, repo_id: str, private: bool = False, adapter_only: bool = False, api=None) -> Pushed:
    """Send the model of ``path`` (a run directory or a model directory) to ``repo_id``; ``api``: an
    ``huggingface_hub.HfApi`` (one with the token by default)."""
    if not is_hub_id(repo_id):
        raise UserError(f"{repo_id!r} is not a Hugging Face repository id (ORG/NAME or USER/NAME)")
    model_dir = model_directory(path)
    token = check_hub_access()
    if adapter_only:
        _warn_local_base(model_dir / ADAPTER_DIR / ADAPTER_CONFIG)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="polyrl-push-") as tmp:
        files = stage(model_dir, Path(tmp), repo_id, adapter_only)
        what = "LoRA adapter" if adapter_only else "model"
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id, folder_path=tmp, commit_message=f"polyrl push: {what} from {model_dir}"
            )
        except Exception as exc:  # huggingface_hub's HTTP errors, httpx's, OSError: one line for each
            raise UserError(f"cannot push to {repo_id}: {type(exc).__name__}: {one_line(exc, 200)}") from None
    url = getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}"
    return Pushed(repo_id, model_dir, files, url)
