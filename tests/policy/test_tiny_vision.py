"""The embedded tiny vision-language model (``model.tiny.vision.enabled``): pictures become the embeddings of their
placeholder tokens in generation and in the training forward alike, prompts differ by their pictures, the
placeholders are never trained on nor sampled, and the model saves and loads back as itself."""

import pickle

import pytest
import torch

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds, collate, distinct
from polyrl.forward.decoder import Decoder
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.learner.sft_step import sft_step
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.policy.tiny import TinyModelConfig
from polyrl.policy.tiny_vision import BLOCKED_LOGIT
from polyrl.tasks import get_task
from polyrl.tasks.base import TEXT_AND_IMAGES, TEXT_ONLY

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
VISION = {"enabled": True, "image_size": 16, "patch_size": 4, "heads": 2}


def _policy(**model):
    return load_policy(ModelConfig(tiny={**SMALL, "vision": VISION}, **model), seed=0, device=HOST)


@pytest.fixture(scope="module")
def policy():
    return _policy()


def _prompts(policy, task="count_shapes", seeds=(0, 1, 2)):
    builder = PromptBuilder(policy.tokenizer, PromptConfig(field="question", style="terse"), policy.image_input)
    return [builder.ids(get_task(task).generate(s, "easy")) for s in seeds]


def _same_text_other_picture(prompt: ImageIds) -> ImageIds:
    pixels = 255 - prompt.pixels
    return ImageIds(list(prompt), pixels, b"other picture")


def test_the_tiny_vision_model_takes_text_and_images(policy):
    assert policy.modalities == TEXT_AND_IMAGES
    assert (policy.image_input.tokens, policy.image_input.size) == (16, 16)


def test_the_default_tiny_model_has_no_encoder_and_no_image_token():
    text = load_policy(ModelConfig(tiny=SMALL), device=HOST)
    assert text.modalities == TEXT_ONLY and text.image_input is None
    assert not any(name.startswith("vision") for name, _ in text.model.named_parameters())
    assert "<image>" not in text.tokenizer.get_vocab()


def test_a_prompt_shows_each_picture_as_its_placeholders_and_carries_its_pixels(policy):
    prompt = _prompts(policy)[0]
    image_id = policy.model.config.image_token_id
    assert isinstance(prompt, ImageIds) and prompt.pixels.shape == (1, 16, 16, 3)
    assert prompt.count(image_id) == 16
    assert prompt.pixels.dtype == torch.uint8


def test_generation_log_probs_equal_the_training_forward_s_on_prompts_with_pictures(policy):
    prompts = _prompts(policy)
    torch.manual_seed(0)
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    gens = backend.generate([p for p in prompts for _ in range(3)], max_new_tokens=8, temperature=1.0)
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    for share in (True, False):
        with torch.no_grad():
            logp, _ = sequence_logprobs(policy.model, batch, share_prompts=share)
        for i, gen in enumerate(gens):
            assert torch.allclose(logp[i][batch.loss_mask[i].bool()], torch.tensor(gen.logprobs), atol=1e-5)


def test_two_problems_with_the_same_text_and_other_pictures_are_two_prompts(policy):
    prompt = _prompts(policy)[0]
    other = _same_text_other_picture(prompt)
    assert distinct([prompt, other, prompt.copy()])[1] == [0, 1, 0]
    state = TransformersBackend(policy.model, policy.tokenizer, device=HOST).decode_state([prompt, other], 4)
    alone = TransformersBackend(policy.model, policy.tokenizer, device=HOST).decode_state([other], 4)
    assert not torch.allclose(state.first_logits[0], state.first_logits[1])
    assert torch.allclose(state.first_logits[1], alone.first_logits[0], atol=1e-5)


def test_the_shared_prompt_forward_keys_on_the_pictures(policy):
    prompt = _prompts(policy)[0]
    other = _same_text_other_picture(prompt)
    response = [policy.tokenizer.convert_tokens_to_ids(c) for c in "<answer>2"]
    batch = collate([(prompt, response), (other, response)], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        shared, _ = sequence_logprobs(policy.model, batch, share_prompts=True)
        apart, _ = sequence_logprobs(policy.model, batch, share_prompts=False)
    assert torch.allclose(shared, apart, atol=1e-5)
    assert not torch.allclose(shared[0], shared[1])


def test_placeholder_tokens_are_never_trained_on(policy):
    prompt = _prompts(policy)[0]
    batch = collate([(prompt, [5, 6, policy.tokenizer.eos_token_id])], policy.tokenizer.pad_token_id)
    targets = batch.input_ids[0, 1:]
    placeholders = targets == policy.model.config.image_token_id
    assert placeholders.sum() == 16 and batch.loss_mask[0][placeholders].sum() == 0
    assert batch.loss_mask[0].sum() == 3


def test_the_policy_never_predicts_a_placeholder(policy):
    dec = Decoder.of(policy.model)
    logits = dec.head(torch.randn(4, SMALL["hidden_size"]))
    assert (logits[:, policy.model.config.image_token_id] == BLOCKED_LOGIT).all()


def test_placeholders_without_their_pictures_are_refused(policy):
    plain = list(_prompts(policy)[0])
    batch = collate([(plain, [5])], policy.tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="16 image placeholder tokens without their pictures"):
        sequence_logprobs(policy.model, batch)
    with pytest.raises(ValueError, match="packed forward only"):
        policy.model(input_ids=torch.tensor([plain]))


def test_an_image_prompt_pickles_with_its_pictures(policy):
    prompt = _prompts(policy)[0]
    back = pickle.loads(pickle.dumps(prompt))
    assert back == prompt and torch.equal(back.pixels, prompt.pixels) and back.images_key == prompt.images_key


def test_an_sft_step_trains_the_encoder_and_lowers_the_loss():
    policy = _policy()
    model = policy.model
    prompts = _prompts(policy, seeds=range(4))
    answer = [policy.tokenizer.convert_tokens_to_ids(c) for c in "<answer>3"] + [policy.tokenizer.eos_token_id]
    sequences = [(p, answer) for p in prompts]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)  # only a gradient moves a weight
    before = model.vision.patches.weight.detach().clone()
    losses = [
        sft_step(model, optimizer, params, policy.tokenizer.pad_token_id, sequences, None, HOST) for _ in range(5)
    ]
    assert losses[-1] < losses[0]
    assert not torch.equal(model.vision.patches.weight, before)


def test_the_saved_model_loads_back_as_itself(policy, tmp_path):
    policy.save(tmp_path / "vlm")
    back = load_policy(ModelConfig(path=str(tmp_path / "vlm")), device=HOST)
    assert back.modalities == TEXT_AND_IMAGES and back.image_input == policy.image_input
    prompts = _prompts(policy)
    batch = collate([(p, [5, 6]) for p in prompts], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        assert torch.equal(sequence_logprobs(back.model, batch)[0], sequence_logprobs(policy.model, batch)[0])


def test_the_transformers_forward_is_refused_for_the_vision_model_in_its_config():
    with pytest.raises(ValueError, match=r"model\.forward: transformers cannot take images"):
        ModelConfig(tiny={**SMALL, "vision": VISION}, forward="transformers")


def test_the_transformers_forward_is_refused_for_a_saved_vision_model(policy, tmp_path):
    policy.save(tmp_path / "vlm")
    with pytest.raises(UserError, match=r"model\.forward: transformers cannot take images"):
        load_policy(ModelConfig(path=str(tmp_path / "vlm"), forward="transformers"), device=HOST)


def test_a_picture_side_that_is_not_whole_patches_is_refused():
    with pytest.raises(ValueError, match="image_size 30 is not a whole number of patch_size 8"):
        TinyModelConfig(vision={"enabled": True, "image_size": 30})
