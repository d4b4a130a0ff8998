"""A damaged or mismatched model directory is one line naming what is wrong (exit code 2), for train, eval and
serve alike, before anything trains or serves: never a traceback, never weights that start random or NaN.

Each test damages a copy of a ~25 k-parameter checkpoint saved in tmp_path (issue #36, "model files")."""

import json

import numpy as np
import pytest
from small_checkpoints import save_small_checkpoint

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

SHAPE = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)


@pytest.fixture
def checkpoint(tmp_path):
    """A sound checkpoint of the embedded model's shape (SHAPE), in its own folder."""
    model, tokenizer = build_tiny_policy(SHAPE)
    path = tmp_path / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _edit_config(path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **changes}))


def _refused(path) -> str:
    """The one-line UserError loading ``path`` raises."""
    with pytest.raises(UserError) as err:
        load_policy(ModelConfig(path=str(path)), device=HOST)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_sound_checkpoint_loads(checkpoint):
    assert type(load_policy(ModelConfig(path=str(checkpoint)), device=HOST).model).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda data: data[: len(data) // 20], "incomplete metadata, file not fully covered"),
        (lambda data: np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes(), "header"),
    ],
    ids=["truncated", "random-bytes"],
)
def test_a_damaged_weights_file_is_named_with_what_is_wrong(checkpoint, damage, problem):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    message = _refused(checkpoint)
    assert message.startswith(f"{weights} is damaged or not a safetensors file (") and problem in message


def test_a_config_whose_shapes_differ_from_the_weights_names_the_tensor_and_both_shapes(checkpoint):
    _edit_config(checkpoint, intermediate_size=96)
    message = _refused(checkpoint)
    assert "weight model.layers.0.mlp.down_proj.weight is (32, 64) in the files but (32, 96) in config.json" in message
    assert "(and 5 more)" in message


def test_weights_the_config_asks_for_and_the_files_lack_are_refused_not_initialised_at_random(checkpoint):
    _edit_config(checkpoint, num_hidden_layers=3)
    message = _refused(checkpoint)
    assert "9 weights its config.json asks for are not in the files (model.layers.2." in message
    assert "they would start random" in message


def test_a_bert_config_over_llama_weights_is_refused(checkpoint):
    _edit_config(checkpoint, model_type="bert", architectures=["BertModel"])
    assert "weights its config.json asks for are not in the files (bert.embeddings." in _refused(checkpoint)


def _bert_lm(path, is_decoder: bool):
    """A complete BertLMHeadModel checkpoint: every weight there, causal only with ``is_decoder``."""
    from transformers import BertConfig, BertLMHeadModel

    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    return save_small_checkpoint(
        path, BertConfig, BertLMHeadModel, **shape, max_position_embeddings=64, is_decoder=is_decoder
    )


def test_an_encoder_with_all_its_weights_is_refused_as_not_causal(tmp_path):
    message = _refused(_bert_lm(tmp_path / "bert", is_decoder=False))
    assert "(BertLMHeadModel) is not a causal language model: its first position sees the tokens after it" in message


def test_the_same_architecture_configured_as_a_decoder_loads(tmp_path):
    assert type(
        load_policy(ModelConfig(path=str(_bert_lm(tmp_path / "bert", is_decoder=True))), device=HOST).model
    ).__name__ == ("BertLMHeadModel")


def test_nan_weights_in_a_checkpoint_are_named(checkpoint):
    from safetensors.torch import load_file, save_file

    weights = load_file(str(checkpoint / "model.safetensors"))
    weights["model.norm.weight"][3] = float("nan")
    save_file(weights, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    assert "weight model.norm.weight holds 1 NaN or infinite values of 32" in _refused(checkpoint)


def test_a_gguf_file_whose_tensor_bytes_are_random_is_refused_and_not_cached(tiny_gguf, cache):
    from polyrl.policy.resolve import resolve_model_path

    data = bytearray(tiny_gguf.read_bytes())
    junk = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert not np.isfinite(np.frombuffer(junk, np.float32)).all()  # the 4 KiB hold a few NaN/inf bit patterns
    data[-4096:] = junk  # inside the last tensor (blk.1.ffn_down, 8 KiB of float32)
    tiny_gguf.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"GGUF file .*tiny\.gguf is damaged: weight model\.layers\.1\.mlp\.down_proj"):
        resolve_model_path(str(tiny_gguf))
    assert not cache.exists() or list(cache.iterdir()) == []


@pytest.fixture
def damaged(checkpoint):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    return checkpoint


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("polyrl: error:")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def test_train_on_a_damaged_checkpoint_stops_before_it_writes_its_run(damaged, tmp_path, capsys):
    assert run(["train", "--run-dir", str(tmp_path / "run"), f"model.path={damaged}"]) == 2
    assert "model.safetensors is damaged" in _one_error_line(capsys)
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_eval_of_a_damaged_checkpoint_is_one_line(damaged, tmp_path, capsys):
    args = ["eval", "--model", str(damaged), "--tasks", "addition", "--n", "1", "--out", str(tmp_path / "e")]
    assert run(args) == 2
    assert "model.safetensors is damaged" in _one_error_line(capsys)


def test_serve_refuses_a_damaged_checkpoint_before_it_listens(damaged, capsys, monkeypatch):
    pytest.importorskip("fastapi")
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda self: pytest.fail("served a checkpoint it could not load"))
    assert run(["serve", str(damaged)]) == 2
    assert "model.safetensors is damaged" in _one_error_line(capsys)


def test_serve_refuses_an_encoder_checkpoint(tmp_path, capsys, monkeypatch):
    pytest.importorskip("fastapi")
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda self: pytest.fail("served random or bidirectional weights"))
    assert run(["serve", str(_bert_lm(tmp_path / "bert", is_decoder=False))]) == 2
    assert "is not a causal language model" in _one_error_line(capsys)


def test_weights_the_config_has_no_place_for_are_a_one_line_warning(checkpoint):
    _edit_config(checkpoint, num_hidden_layers=1)
    with pytest.warns(UserWarning, match=r"9 weights in the files are not part of the model .* \(model\.layers\.1\."):
        load_policy(ModelConfig(path=str(checkpoint)), device=HOST)
