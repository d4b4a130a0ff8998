"""The picture inputs of a Hugging Face vision-language model, computed by polyrl from the checkpoint's saved
preprocessor settings rather than by transformers' image-processor classes (which, depending on the transformers
version, cannot be built without torchvision).

polyrl gives every picture the model's fixed square size itself and never splits a picture, so what the family's
image processor would do reduces to: rescale (``rescale_factor``), normalize (``image_mean``/``image_std``) and the
family's layout. Idefics3: ``pixel_values [1, n, 3, S, S]`` and an all-ones ``pixel_attention_mask [1, n, S, S]``;
Qwen2-VL: every picture's patches flattened (each picture repeated over the ``temporal_patch_size`` frames) into
``pixel_values [n·h·w, 3·T·P·P]`` and ``image_grid_thw [n, 3]``. A test checks both against transformers' own
image processors where they can be built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from polyrl.errors import UserError
from polyrl.policy.model_files import one_line

PREPROCESSOR_FILE = "preprocessor_config.json"
"""Where transformers saves an image processor's settings on its own."""
PROCESSOR_FILE = "processor_config.json"
"""Where newer transformers save a processor's settings, the image processor's under ``image_processor``."""
DEFAULTS = {
    "idefics3": {"image_mean": [0.5] * 3, "image_std": [0.5] * 3},
    "qwen2_vl": {
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
    },
}
"""The family's image-processor class defaults, for settings a saved config leaves out."""


@dataclass(frozen=True)
class PicturePreprocessing:
    """How the pictures of a Hugging Face VLM become its inputs: the family and its saved image-processor
    settings; ``files`` are the checkpoint's processor files as read, saved back unchanged."""

    family: str
    settings: dict
    files: dict = field(default_factory=dict, compare=False)

    def _get(self, key: str):
        value = self.settings.get(key)
        return value if value is not None else DEFAULTS[_base(self.family)].get(key)

    @property
    def patch_size(self) -> int:
        return int(self._get("patch_size"))

    @property
    def merge_size(self) -> int:
        return int(self._get("merge_size"))

    @property
    def temporal_patch_size(self) -> int:
        return int(self._get("temporal_patch_size"))

    @classmethod
    def from_pretrained(cls, path: str | Path, family: str) -> PicturePreprocessing:
        """The settings saved at ``path`` (``preprocessor_config.json``, else ``processor_config.json``'s
        ``image_processor``); a checkpoint with neither is a UserError."""
        files = {}
        for name in (PREPROCESSOR_FILE, PROCESSOR_FILE):
            try:
                files[name] = json.loads((Path(path) / name).read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                raise UserError(f"model at {str(path)!r}: cannot read its {name}: {one_line(exc)}") from None
        settings = files.get(PREPROCESSOR_FILE)
        if not isinstance(settings, dict):
            settings = (files.get(PROCESSOR_FILE) or {}).get("image_processor")
        if not isinstance(settings, dict):
            raise UserError(
                f"model at {str(path)!r} has no image processor settings ({PREPROCESSOR_FILE}, or "
                f"{PROCESSOR_FILE} with an image_processor)"
            )
        return cls(family, settings, files)

    def save_pretrained(self, path: str | Path) -> None:
        """Write the processor files this was read from (or the settings alone) into ``path``."""
        files = self.files or {PREPROCESSOR_FILE: self.settings}
        for name, content in files.items():
            (Path(path) / name).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")

    def values(self, pixels: Tensor) -> Tensor:
        """``uint8 [n, S, S, 3]`` pictures rescaled and normalized: ``float32 [n, 3, S, S]``."""
        x = pixels.permute(0, 3, 1, 2).to(torch.float32)
        if self.settings.get("do_rescale", True):
            x = x * float(self.settings.get("rescale_factor") or 1 / 255)
        if self.settings.get("do_normalize", True):
            mean = torch.tensor(self._get("image_mean"), dtype=torch.float32).view(1, -1, 1, 1)
            std = torch.tensor(self._get("image_std"), dtype=torch.float32).view(1, -1, 1, 1)
            x = (x - mean) / std
        return x

    def __call__(self, pictures: list[Tensor]) -> dict:
        """The model's picture inputs for ``pictures`` (``uint8 [S, S, 3]`` each, in the order of their image
        tokens), on the host."""
        values = self.values(torch.stack([torch.as_tensor(p) for p in pictures]))
        if self.family == "idefics3":
            n, _, side, _ = values.shape
            mask = torch.ones(1, n, side, side, dtype=torch.bool)
            return {"pixel_values": values.unsqueeze(0), "pixel_attention_mask": mask}
        return self._qwen_patches(values)

    def _qwen_patches(self, values: Tensor) -> dict:
        n, channels, height, width = values.shape
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        h, w = height // p, width // p
        patches = values.reshape(n, channels, h // m, m, p, w // m, m, p)
        # per picture: (merged row, merged column, row in merge, column in merge, channel, pixel row, pixel column)
        patches = patches.permute(0, 2, 5, 3, 6, 1, 4, 7).unsqueeze(6)
        patches = patches.expand(*patches.shape[:6], t, p, p)  # the one picture over every frame of a patch
        grid = torch.tensor([[1, h, w]] * n, dtype=torch.long)
        return {"pixel_values": patches.reshape(n * h * w, channels * t * p * p), "image_grid_thw": grid}


def _base(family: str) -> str:
    return "idefics3" if family == "idefics3" else "qwen2_vl"
