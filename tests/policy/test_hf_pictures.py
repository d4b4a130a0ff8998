"""polyrl's own picture preprocessing for Hugging Face VLMs agrees with transformers' image processors (where this
transformers can build them) and reads the settings however the checkpoint saved them."""

import json

import pytest
import torch

from polyrl.errors import UserError
from polyrl.policy.hf_pictures import PicturePreprocessing


def _pictures(count: int, side: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (side, side, 3), dtype=torch.uint8, generator=generator) for _ in range(count)]


def _transformers_class(*names: str):
    import transformers

    for name in names:
        try:
            return getattr(transformers, name)()
        except (ImportError, AttributeError):  # a class this transformers lacks, or one that needs torchvision
            continue
    pytest.skip(f"this transformers ({transformers.__version__}) builds none of {names}")


def test_idefics3_inputs_equal_the_transformers_image_processor_s():
    reference = _transformers_class("Idefics3ImageProcessorPil", "Idefics3ImageProcessor")
    pictures, side = _pictures(3, 32), {"longest_edge": 32}
    expected = reference(
        images=[p.numpy() for p in pictures],
        return_tensors="pt",
        do_image_splitting=False,
        size=side,
        max_image_size=side,
    )
    ours = PicturePreprocessing("idefics3", reference.to_dict())(pictures)
    assert ours["pixel_values"].shape == (1, 3, 3, 32, 32)
    assert torch.allclose(ours["pixel_values"], expected["pixel_values"].reshape(1, 3, 3, 32, 32), atol=1e-5)
    assert torch.equal(ours["pixel_attention_mask"], expected["pixel_attention_mask"].reshape(1, 3, 32, 32).bool())


@pytest.mark.parametrize("patch_size", [4, 14])
def test_qwen2_vl_patches_and_grid_equal_the_transformers_image_processor_s(patch_size):
    reference = _transformers_class("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor")
    settings = {**reference.to_dict(), "patch_size": patch_size, "merge_size": 2, "temporal_patch_size": 2}
    reference = type(reference)(**{k: settings[k] for k in ("patch_size", "merge_size", "temporal_patch_size")})
    side = patch_size * 2 * 2
    pictures = _pictures(2, side)
    expected = reference(images=[p.numpy() for p in pictures], return_tensors="pt", do_resize=False)
    ours = PicturePreprocessing("qwen2_vl", settings)(pictures)
    assert torch.equal(ours["image_grid_thw"], expected["image_grid_thw"])
    assert ours["pixel_values"].shape == expected["pixel_values"].shape
    assert torch.allclose(ours["pixel_values"], expected["pixel_values"].float(), atol=1e-5)


def test_settings_nested_in_processor_config_are_read_and_saved_back_unchanged(tmp_path):
    saved = {"image_processor": {"image_mean": [0.1, 0.2, 0.3], "image_std": [1, 1, 1]}, "image_seq_len": 4}
    (tmp_path / "processor_config.json").write_text(json.dumps(saved))
    read = PicturePreprocessing.from_pretrained(tmp_path, "idefics3")
    assert read.settings["image_mean"] == [0.1, 0.2, 0.3]
    (tmp_path / "copy").mkdir()
    read.save_pretrained(tmp_path / "copy")
    assert json.loads((tmp_path / "copy" / "processor_config.json").read_text()) == saved


def test_a_checkpoint_without_image_processor_settings_is_a_user_error(tmp_path):
    (tmp_path / "processor_config.json").write_text('{"image_seq_len": 4}')
    with pytest.raises(UserError, match="no image processor settings"):
        PicturePreprocessing.from_pretrained(tmp_path, "idefics3")
