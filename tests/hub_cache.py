"""A Hugging Face Hub cache laid out by hand, as ``from_pretrained`` and ``snapshot_download`` leave it:
``models--ORG--NAME/refs/<branch>`` holds a commit hash, ``snapshots/<commit>/`` the files. No network is needed:
with ``HF_HUB_OFFLINE=1`` the cache is all there is (docs/from-trl.md says how the real-model checks use it)."""

import hashlib
import shutil
from pathlib import Path

LICENSED_CARD = "---\nlicense: apache-2.0\n---\n\n# A model\n"


def commit_for(text: str) -> str:
    """A 40-hex commit hash (the Hub's are SHA-1 hex digests too)."""
    return hashlib.sha1(text.encode()).hexdigest()


def lay_out(
    cache: Path,
    repo_id: str,
    files_from: Path,
    commit: str | None = None,
    branch: str | None = "main",
    readme: str | None = LICENSED_CARD,
    copy: bool = False,
) -> Path:
    """``files_from``'s files as the snapshot ``commit`` of ``repo_id`` in ``cache`` (symlinks, or copies with
    ``copy``), ``refs/<branch>`` pointing at it; ``readme``: the model card the snapshot carries. Its path."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    commit = commit or commit_for(f"{repo_id}:{files_from}")
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in files_from.iterdir():
        if file.is_file():
            if copy:
                shutil.copy2(file, snapshot / file.name)
            else:
                (snapshot / file.name).symlink_to(file.resolve())
    if readme is not None:
        (snapshot / "README.md").write_text(readme)
    if branch is not None:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / branch).write_text(commit)
    return snapshot
