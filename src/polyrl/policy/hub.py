"""Models on the Hugging Face Hub, through ``huggingface_hub`` and its cache (no HTTP written here).

A Hub id (``ORG/NAME``) is looked up in the cache first (``HF_HUB_CACHE``, by default ``$HF_HOME/hub``), as
``from_pretrained`` lays it out: ``models--ORG--NAME/refs/<branch>`` names a commit, ``snapshots/<commit>/`` holds
its files. Only an id (or revision) the cache lacks is downloaded, and only where the Hub may be reached
(``HF_HUB_OFFLINE`` unset); ``HF_TOKEN`` (or ``hf auth login``) grants private and gated repositories. Every way
this fails is one line naming the id, the cache and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from polyrl.errors import UserError
from polyrl.policy.model_files import one_line

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
"""``ORG/NAME``: what polyrl takes for a Hub id when no local directory of that name exists. Ids without an org
(``gpt2``) are the Hub's legacy aliases of ``openai-community/gpt2`` and the like: name the org."""

COMMIT = re.compile(r"^[0-9a-f]{40}$")

IGNORED_FILES = [
    "*.gguf",
    "*.onnx",
    "*.onnx_data",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.tflite",
    "*.mlmodel",
    "*.pth",
    "*.pt",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    "original/*",
]
"""Files of a model repository that training never reads (other frameworks' weights, the original release's
consolidated checkpoint): left out of a download. PyTorch ``*.bin`` weights are left out too when the revision has
safetensors (:func:`ignored_files`)."""


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a Hub model id (``ORG/NAME``, no path syntax)."""
    return bool(HUB_ID.match(name)) and ".." not in name and "--" not in name


def hub_cache() -> Path:
    """Where ``huggingface_hub`` keeps snapshots (``HF_HUB_CACHE``; default ``$HF_HOME/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: nothing may reach the Hub."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


@dataclass(frozen=True)
class Snapshot:
    """One revision of a Hub repository in the local cache."""

    repo_id: str
    commit: str
    """The 40-hex commit hash the revision resolved to (what a run records, so that a rerun loads these files)."""
    path: Path


def _snapshot(folder: str, repo_id: str) -> Snapshot:
    path = Path(folder)
    return Snapshot(repo_id, path.name, path)


def _pull_hint(repo_id: str, revision: str | None) -> str:
    return f"polyrl models pull {repo_id}" + (f" --revision {revision}" if revision else "")


def cached_snapshot(repo_id: str, revision: str | None = None) -> Snapshot | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch, tag or commit; None: main), or None when the
    cache has none. A snapshot the cache knows to be incomplete is a UserError."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=hub_cache(), local_files_only=True)
    except IncompleteSnapshotError as exc:
        raise UserError(
            f"the cached snapshot of {repo_id} in {hub_cache()} is incomplete ({one_line(exc, 160)}): "
            f"{_pull_hint(repo_id, revision)}"
        ) from None
    except LocalEntryNotFoundError:
        return None
    return _snapshot(folder, repo_id)


def ignored_files(files: list[str]) -> list[str]:
    """The download's ignore patterns for a revision holding ``files``: :data:`IGNORED_FILES`, and PyTorch
    ``*.bin`` weights when safetensors weights are there (transformers reads those first)."""
    if any(f.endswith(".safetensors") for f in files):
        return [*IGNORED_FILES, "*.bin"]
    return list(IGNORED_FILES)


def download_snapshot(repo_id: str, revision: str | None = None, log=None, pulling: bool = False) -> Snapshot:
    """Fetch ``repo_id`` at ``revision`` into the cache (files already there are kept) and return its snapshot.
    Offline, unreachable, unknown, gated or private: one UserError line."""
    from huggingface_hub import HfApi, snapshot_download

    if offline():
        raise UserError(
            f"model {repo_id!r} is neither a local directory nor in the Hugging Face cache ({hub_cache()}), and "
            f"HF_HUB_OFFLINE is set: fetch it where the Hub is reachable ({_pull_hint(repo_id, revision)}), or "
            "copy that cache here"
        )
    if log is not None:
        log(f"downloading {repo_id}{'@' + revision if revision else ''} from the Hugging Face Hub into {hub_cache()}")
    try:
        files = HfApi().list_repo_files(repo_id, revision=revision)
        folder = snapshot_download(
            repo_id, revision=revision, cache_dir=hub_cache(), ignore_patterns=ignored_files(files)
        )
    except Exception as exc:  # huggingface_hub's errors, httpx's and OSError: one line for each kind
        raise UserError(_download_failure(exc, repo_id, revision, pulling)) from None
    return _snapshot(folder, repo_id)


def _download_failure(exc: Exception, repo_id: str, revision: str | None, pulling: bool) -> str:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(exc, GatedRepoError):
        return (
            f"model {repo_id!r} is gated: accept its terms on https://huggingface.co/{repo_id}, then set HF_TOKEN "
            "(or run `hf auth login`)"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return (
            f"the Hugging Face Hub has no model {repo_id!r} (or it is private and HF_TOKEN does not grant it); "
            "check the id"
        )
    if isinstance(exc, RevisionNotFoundError):
        return f"model {repo_id!r} has no revision {revision!r} on the Hugging Face Hub"
    reason = f"{type(exc).__name__}: {one_line(exc, 120)}"
    if pulling:
        return f"cannot fetch {repo_id!r} from the Hugging Face Hub ({reason}); the cache ({hub_cache()}) is unchanged"
    return (
        f"model {repo_id!r} is neither a local directory nor in the Hugging Face cache ({hub_cache()}), and the "
        f"Hub could not be reached ({reason}): fetch it where the Hub is "
        f"reachable ({_pull_hint(repo_id, revision)}), or copy that cache here"
    )


def hub_snapshot(repo_id: str, revision: str | None = None, log=None) -> Snapshot:
    """``repo_id`` at ``revision`` from the cache, downloaded first when the cache lacks it. A cached branch is
    used as cached (``polyrl models pull`` brings it up to date), so runs never wait on the network."""
    return cached_snapshot(repo_id, revision) or download_snapshot(repo_id, revision, log)


def pull(repo_id: str, revision: str | None = None, log=None) -> Snapshot:
    """``polyrl models pull``: the newest files of ``repo_id`` at ``revision`` from the Hub into the cache."""
    if not is_hub_id(repo_id):
        raise UserError(f"{repo_id!r} is not a Hugging Face Hub model id (ORG/NAME, e.g. Qwen/Qwen2.5-0.5B-Instruct)")
    if offline():
        raise UserError(f"polyrl models pull {repo_id} needs the Hugging Face Hub, and HF_HUB_OFFLINE is set")
    return download_snapshot(repo_id, revision, log, pulling=True)


def cached_models() -> list[tuple[str, list[str]]]:
    """Model repositories in the Hub cache, each with its cached commits (short); empty without a cache."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(hub_cache())
    except (CacheNotFound, OSError):
        return []
    return sorted(
        (repo.repo_id, sorted(r.commit_hash[:10] for r in repo.revisions))
        for repo in info.repos
        if repo.repo_type == "model"
    )
