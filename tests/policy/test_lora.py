"""LoRA as PEFT users configure it: ``model.lora``'s fields reach PEFT, an existing adapter is loaded to continue
training (its settings recorded in the config), and every mismatch is one line."""

import pytest
import torch
from pydantic import ValidationError
from small_checkpoints import save_small_checkpoint

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.policy.loading import ModelConfig, load_policy, pin_model
from polyrl.policy.lora import LoraConfig


def lora_policy(base, **lora):
    return load_policy(ModelConfig(path=str(base), lora={"enabled": True, **lora}), device=HOST)


def adapted(policy, name: str = "q_proj"):
    """The first decoder layer's ``name`` LoRA layer."""
    layer = policy.model.get_base_model().model.layers[0]
    return getattr(layer.self_attn, name, None) or getattr(layer.mlp, name)


def test_the_fields_people_set_reach_peft(tiny_model_dir):
    policy = lora_policy(
        tiny_model_dir,
        r=4,
        alpha=8,
        dropout=0.1,
        target_modules=["q_proj", "v_proj"],
        modules_to_save=["lm_head"],
        use_rslora=True,
    )
    peft = policy.model.peft_config["default"]
    assert (peft.r, peft.lora_alpha, peft.lora_dropout, peft.use_rslora) == (4, 8, 0.1, True)
    assert set(peft.target_modules) == {"q_proj", "v_proj"}
    assert adapted(policy).scaling["default"] == pytest.approx(8 / 4**0.5)  # rsLoRA: alpha / sqrt(r)
    assert not hasattr(adapted(policy, "k_proj"), "lora_A")  # only the named modules
    trainable = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert any("lm_head.modules_to_save" in n for n in trainable)  # trained in full beside the adapters


def test_all_linear_adapts_every_linear_layer_but_the_output_head(tiny_model_dir):
    policy = lora_policy(tiny_model_dir, r=2)
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert all(hasattr(adapted(policy, n), "lora_A") for n in names)
    assert not hasattr(policy.model.get_base_model().lm_head, "lora_A")


def test_dora_trains_a_magnitude_per_output(tiny_model_dir):
    layer = adapted(lora_policy(tiny_model_dir, r=2, use_dora=True))
    magnitude = layer.lora_magnitude_vector["default"].weight
    assert magnitude.requires_grad and magnitude.shape == (layer.out_features,)


def test_bias_all_trains_the_base_biases(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2
    )
    qwen = save_small_checkpoint(tmp_path / "qwen", Qwen2Config, Qwen2ForCausalLM, **shape)  # q/k/v have biases
    trainable = {n for n, p in lora_policy(qwen, r=2, bias="all").model.named_parameters() if p.requires_grad}
    assert any(n.endswith("q_proj.base_layer.bias") for n in trainable)


def test_a_target_module_the_model_lacks_is_one_line(tiny_model_dir):
    with pytest.raises(UserError, match=r"^model\.lora: Target modules \{'nope_proj'\} not found"):
        lora_policy(tiny_model_dir, target_modules=["nope_proj"])


@pytest.fixture(scope="module")
def trained_adapter(tmp_path_factory, tiny_model_dir):
    """A polyrl model directory whose adapter (r 4, alpha 8, q/v) holds moved weights."""
    policy = lora_policy(tiny_model_dir, r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_" in name:
                param.add_(0.05)
    out = tmp_path_factory.mktemp("adapter") / "final_model"
    policy.save(out)
    return out, {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" in n}


def test_an_adapter_is_loaded_with_its_weights_to_continue_training(tiny_model_dir, trained_adapter):
    directory, weights = trained_adapter
    for where in (directory / "adapter", directory):  # the adapter folder, or the polyrl model directory holding it
        policy = load_policy(ModelConfig(path=str(tiny_model_dir), lora={"adapter": str(where)}), device=HOST)
        loaded = {n: p for n, p in policy.model.named_parameters() if "lora_" in n}
        assert loaded.keys() == weights.keys()
        assert all(torch.equal(loaded[n], weights[n]) and loaded[n].requires_grad for n in weights)


def test_pinning_records_the_adapter_settings(tiny_model_dir, trained_adapter):
    directory, _ = trained_adapter
    pinned = pin_model(ModelConfig(path=str(tiny_model_dir), lora={"adapter": str(directory)})).lora
    assert (pinned.enabled, pinned.r, pinned.alpha, pinned.target_modules) == (True, 4, 8, ["q_proj", "v_proj"])
    again = ModelConfig.model_validate({"path": str(tiny_model_dir), "lora": pinned.model_dump()})
    assert pin_model(again).lora == pinned  # a resume's saved config, every field set, pins to itself


def test_a_setting_the_adapter_contradicts_is_refused(tiny_model_dir, trained_adapter):
    directory, _ = trained_adapter
    with pytest.raises(UserError, match=r"model\.lora\.r is 8 but the adapter .* has 4: .* drop model\.lora\.r"):
        pin_model(ModelConfig(path=str(tiny_model_dir), lora={"adapter": str(directory), "r": 8}))


def test_naming_an_adapter_turns_lora_on_and_turning_it_off_is_refused():
    assert LoraConfig(adapter="x").enabled
    with pytest.raises(ValidationError, match="adapter is set but enabled is false"):
        LoraConfig(adapter="x", enabled=False)
    with pytest.raises(ValidationError, match="adapter_revision is set but adapter is not"):
        LoraConfig(adapter_revision="main")


def test_a_directory_without_an_adapter_is_refused(tiny_model_dir):
    with pytest.raises(UserError, match=r"has no adapter_config\.json: not a PEFT adapter directory"):
        pin_model(ModelConfig(path=str(tiny_model_dir), lora={"adapter": str(tiny_model_dir)}))


def test_an_adapter_of_another_base_shape_is_one_line(tiny_model_dir, tmp_path):
    other = tmp_path / "other"
    shape = {"hidden_size": 16, "intermediate_size": 32, "num_layers": 2, "num_heads": 2}
    load_policy(ModelConfig(path="tiny", tiny=shape, lora={"enabled": True, "r": 2}), device=HOST).save(other)
    with pytest.raises(UserError, match=r"cannot load the LoRA adapter .* onto this model"):
        load_policy(ModelConfig(path=str(tiny_model_dir), lora={"adapter": str(other)}), device=HOST)
