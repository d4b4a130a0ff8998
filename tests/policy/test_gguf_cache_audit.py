"""The converted-GGUF cache against a hostile or careless user (issue #43): a conversion is never served for other
bytes than it was made from, and the digest memo is untrusted input.

Before: a ``.gguf`` rewritten in place with its time stamps kept (``touch -r``, ``cp -p``, ``rsync -t``) kept
serving the old conversion — ``polyrl models prepare`` and ``polyrl train`` exited 0 on the old weights — and a
memo value with ``../`` made a folder ``cache/models/a-..`` (an ``OSError`` traceback), a non-hex value named the
folder and was recorded as the model's ``sha256``. Runs on the 0.2 MB GGUF file of tests/policy/conftest.py.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from polyrl.cli import run
from polyrl.policy import presets
from polyrl.policy.presets import DIGESTS_FILE
from polyrl.policy.resolve import resolve_model_path
from polyrl.run_dir import file_sha256

NORMS = ("output_norm.weight", "blk.0.attn_norm.weight")
"""The two tensors the audit edited (``model.norm.weight`` and ``model.layers.0.input_layernorm.weight`` once
converted): ones in the file conftest writes."""


def edit_norms_in_place(path: Path, value: float) -> None:
    """Overwrite :data:`NORMS` with ``value`` in the file's own bytes, then put its access and modification times
    back: same inode, same size, same mtime — what ``touch -r`` after an edit, or a copy that keeps times, leaves."""
    import gguf

    before = os.stat(path)
    offsets = {t.name: (int(t.data_offset), int(t.n_elements)) for t in gguf.GGUFReader(path).tensors}
    with open(path, "r+b") as f:
        for name in NORMS:
            offset, count = offsets[name]
            f.seek(offset)
            f.write(np.full(count, value, np.float32).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def converted_norm(path: str) -> np.ndarray:
    return load_file(str(Path(path) / "model.safetensors"))["model.norm.weight"]


def test_a_file_rewritten_in_place_with_its_times_kept_is_converted_again(tiny_gguf, cache):
    first = resolve_model_path(str(tiny_gguf))
    assert np.all(converted_norm(first) == 1.0)
    edit_norms_in_place(tiny_gguf, 2.0)
    again = resolve_model_path(str(tiny_gguf))
    assert again != first and np.all(converted_norm(again) == 2.0)
    recorded = json.loads((Path(again) / presets.SOURCE_FILE).read_text())
    assert recorded["sha256"] == file_sha256(tiny_gguf)


def test_models_prepare_after_an_in_place_rewrite_converts_the_new_bytes(tiny_gguf, cache, capsys):
    assert run(["models", "prepare", str(tiny_gguf)]) == 0
    edit_norms_in_place(tiny_gguf, 3.0)
    assert run(["models", "prepare", str(tiny_gguf)]) == 0
    out = capsys.readouterr()
    assert out.err.count("converting") == 2
    assert np.all(converted_norm(out.out.strip().splitlines()[-1]) == 3.0)


def test_a_remembered_digest_whose_sampled_fingerprint_changed_is_not_used(tiny_gguf, cache, monkeypatch):
    """Where a file system keeps even the change time (or reports none), the fingerprint still catches an edit
    of the bytes it reads — all of a file this small."""
    monkeypatch.setattr(presets, "_stat_key", lambda source: f"{source.resolve()}|same")
    first = resolve_model_path(str(tiny_gguf))
    edit_norms_in_place(tiny_gguf, 2.0)
    again = resolve_model_path(str(tiny_gguf))
    assert again != first and np.all(converted_norm(again) == 2.0)


def test_the_fingerprint_of_a_large_file_reads_its_head_and_spread_blocks(tmp_path, monkeypatch):
    """A file over the head and blocks is sampled, not read whole: an edit in the head or at the end changes the
    fingerprint (the change time catches the rest)."""
    monkeypatch.setattr(presets, "SAMPLE_HEAD", 1024)
    monkeypatch.setattr(presets, "SAMPLE_BLOCK", 64)
    monkeypatch.setattr(presets, "SAMPLE_BLOCKS", 4)
    path = tmp_path / "big.gguf"
    data = bytearray(os.urandom(64 * 1024))
    path.write_bytes(data)
    first = presets.sampled_fingerprint(path)
    for where in (10, len(data) - 1):
        changed = bytearray(data)
        changed[where] ^= 0xFF
        path.write_bytes(changed)
        assert presets.sampled_fingerprint(path) != first
    path.write_bytes(data)
    assert presets.sampled_fingerprint(path) == first


def _hostile_memo(memo: dict, value) -> dict:
    """Every entry's digest replaced by ``value``, in whatever shape the entry has (its sampled fingerprint kept, so
    that only the digest is wrong)."""
    return {k: ({**v, "sha256": value} if isinstance(v, dict) else value) for k, v in memo.items()}


@pytest.mark.parametrize(
    "value", ["../../../escaped", "..", "/tmp/abs", "Z" * 64, "ab" * 16, 12345, None, ["a"]], ids=repr
)
def test_a_digest_in_the_memo_that_is_not_a_sha256_is_ignored(tiny_gguf, cache, tmp_path, value):
    truth = file_sha256(tiny_gguf)
    resolve_model_path(str(tiny_gguf))
    memo_path = cache.parent / DIGESTS_FILE
    memo_path.write_text(json.dumps(_hostile_memo(json.loads(memo_path.read_text()), value)))
    before = sorted(p for p in tmp_path.rglob("*") if cache not in p.parents and p != cache)
    path = Path(resolve_model_path(str(tiny_gguf)))
    assert path.parent == cache and path.name == f"tiny-{truth[:10]}"
    assert json.loads((path / presets.SOURCE_FILE).read_text())["sha256"] == truth
    assert sorted(p for p in tmp_path.rglob("*") if cache not in p.parents and p != cache) == before
    assert sorted(p.name for p in cache.iterdir()) == [path.name]


@pytest.mark.parametrize("text", ["not json {", "[1, 2]", '"a string"', json.dumps({"x": {"sha256": "0" * 64}})])
def test_a_memo_file_that_is_not_a_memo_is_ignored(tiny_gguf, cache, text):
    memo_path = cache.parent / DIGESTS_FILE
    memo_path.parent.mkdir(parents=True)
    memo_path.write_text(text)
    path = Path(resolve_model_path(str(tiny_gguf)))
    assert json.loads((path / presets.SOURCE_FILE).read_text())["sha256"] == file_sha256(tiny_gguf)
