"""The one resolver every model name goes through: the policy (``model.path``), a LoRA adapter to continue
(``model.lora.adapter``), reward models, local judges, ``polyrl eval --model``, ``polyrl serve``, ``polyrl rm
train --model`` and ``polyrl models prepare``. The KL reference and the critic start from the policy, so they
load what it resolved to.

A name is, in this order:

1. ``tiny`` — the embedded default, built from the config;
2. a preset (``polyrl models list``) or a ``.gguf`` file — converted once into polyrl's cache;
3. a local directory;
4. a Hugging Face Hub id ``ORG/NAME`` — its snapshot at ``revision`` in the Hub cache, downloaded first when the
   cache lacks it and the Hub may be reached (:mod:`polyrl.policy.hub`).

A Hub id resolves to a commit: a run records it (``model.revision``) so that a rerun loads the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from polyrl.errors import UserError
from polyrl.policy.hub import hub_snapshot, is_hub_id
from polyrl.policy.presets import PRESETS, gguf_checkpoint, is_gguf_path
from polyrl.policy.tiny import TINY

ModelKind = Literal["tiny", "preset", "gguf", "directory", "hub"]


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model name led: the Hugging Face directory to load, and where it came from."""

    name: str
    """The name as written."""
    kind: ModelKind
    directory: Path | None
    """The Hugging Face directory (a Hub snapshot, a converted GGUF file, a local folder); None for ``tiny``."""
    repo_id: str | None = None
    """Hub ids: the repository."""
    commit: str | None = None
    """Hub ids: the commit the revision resolved to."""

    @property
    def base_model(self) -> str | None:
        """The Hub id a model card names as the base: the repository, or the one a preset's file was made from."""
        if self.kind == "hub":
            return self.repo_id
        if self.kind == "preset":
            return PRESETS[self.name].hub_id
        return None

    def license(self) -> str | None:
        """The base's license: a preset's, or the ``license:`` of the directory's own model card (README.md)."""
        if self.kind == "preset":
            return PRESETS[self.name].license
        readme = self.directory / "README.md" if self.directory is not None else None
        if readme is None or not readme.is_file():
            return None
        from huggingface_hub import ModelCard

        try:
            license_ = ModelCard.load(readme, ignore_metadata_errors=True).data.license
        except Exception:  # a card that does not parse names no license; training does not depend on it
            return None
        return license_ if isinstance(license_, str) else None

    def describe(self) -> str:
        """One phrase for a log line or a model card: the id and commit, the preset, or the path."""
        if self.kind == "hub":
            return f"{self.repo_id} at commit {self.commit}"
        if self.kind == "preset":
            return f"the preset {self.name} ({PRESETS[self.name].description})"
        return self.name


def _no_revision(name: str, kind: str, revision: str | None) -> None:
    if revision is not None:
        raise UserError(f"a revision ({revision!r}) applies to Hugging Face Hub ids, and {name!r} is {kind}")


def resolve_model(name: str, revision: str | None = None, log=None) -> ResolvedModel:
    """What ``name`` means (see the module docstring); ``revision``: a Hub id's branch, tag or commit (None: main).
    ``log(message)`` hears about a conversion or a download before it starts. Every failure is a UserError."""
    if name == TINY:
        _no_revision(name, "the embedded model", revision)
        return ResolvedModel(name, "tiny", None)
    converted = gguf_checkpoint(name, log)
    if converted is not None:
        _no_revision(name, "a preset" if name in PRESETS else "a .gguf file", revision)
        return ResolvedModel(name, "preset" if name in PRESETS else "gguf", converted)
    local = Path(name).expanduser()
    if local.is_dir():
        _no_revision(name, "a local directory", revision)
        return ResolvedModel(name, "directory", local)
    if is_hub_id(name):
        snapshot = hub_snapshot(name, revision, log)
        return ResolvedModel(name, "hub", snapshot.path, snapshot.repo_id, snapshot.commit)
    raise UserError(
        f"model path {name!r} is not a directory (give 'tiny' for the embedded default, a preset from `polyrl "
        "models list`, a .gguf file, a Hugging Face model directory or a Hub id ORG/NAME)"
    )


def resolve_model_path(name: str, revision: str | None = None, log=None) -> str:
    """The Hugging Face directory ``name`` means, as a string (``tiny`` stays ``tiny``)."""
    resolved = resolve_model(name, revision, log)
    return str(resolved.directory) if resolved.directory is not None else name


def is_local_model(name: str) -> bool:
    """Whether ``name`` names a model on this machine's own files (tiny, a preset, a .gguf file, a directory) rather
    than a Hub id."""
    return name == TINY or name in PRESETS or is_gguf_path(name) or Path(name).expanduser().exists()
