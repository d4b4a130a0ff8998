"""Hugging Face vision-language models as policies (``policy/hf_vision.py``, ``forward/pictures.py``), on small
random-initialised models of the two families (``tests/small_vlms.py``): an Idefics3 (SmolVLM's architecture), a
Qwen2-VL and a Qwen2.5-VL. Each loads from its saved directory, renders prompts with its processor's chat template,
generates with the pictures, scores tokens in training as generation did, never samples nor trains on an image token,
and adapts its language model only with LoRA."""

import pytest
import torch
from PIL import Image
from small_vlms import save_idefics3, save_qwen2_vl

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds, collate
from polyrl.forward.decoder import Decoder
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.forward.pictures import BLOCKED_LOGIT, PictureForward
from polyrl.learner.sft_step import sft_step
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.hf_vision import VISION_TOKENS
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.tasks import get_task
from polyrl.tasks.base import TEXT_AND_IMAGES

FAMILIES = {
    "idefics3": (save_idefics3, {}),
    "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}}),
    "qwen2_5_vl": (lambda path: save_qwen2_vl(path, version="2.5"), {"images": {"size": 16}}),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return {name: save(tmp_path_factory.mktemp(name)) for name, (save, _) in FAMILIES.items()}


def _config(saved, family, **model) -> ModelConfig:
    return ModelConfig(path=str(saved[family]), **{**FAMILIES[family][1], **model})


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def policy(saved, family):
    return load_policy(_config(saved, family), device=HOST)


def _builder(policy):
    return PromptBuilder(policy.tokenizer, PromptConfig(field="question", style="terse"), policy.image_input)


def _prompts(policy, seeds=(0, 1, 2)):
    builder = _builder(policy)
    return [builder.ids(get_task("count_shapes").generate(s, "easy")) for s in seeds]


def test_a_saved_vlm_loads_as_a_policy_of_text_and_images_on_its_own_forward(policy, family):
    assert policy.modalities == TEXT_AND_IMAGES
    assert (policy.image_input.family, policy.image_input.tokens) == (family, 4)
    assert PictureForward.of(policy.model) is not None and Decoder.of(policy.model) is None


def test_the_idefics3_prompt_is_the_processor_s_own_expansion_of_its_chat_template(saved):
    from transformers import AutoProcessor

    policy = load_policy(_config(saved, "idefics3"), device=HOST)
    problem = get_task("count_shapes").generate(0, "easy")
    ids = _builder(policy).ids(problem)
    try:
        processor = AutoProcessor.from_pretrained(saved["idefics3"])
    except (ImportError, ValueError):  # e.g. transformers 5.17 builds Idefics3 image processors only with torchvision
        pytest.skip("this transformers cannot build the Idefics3 processor (polyrl does not need it)")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": problem.question}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    picture = Image.fromarray(ids.pixels[0].numpy())
    expected = processor(text=[text], images=[[picture]], images_kwargs={"do_image_splitting": False}).input_ids[0]
    assert list(ids) == list(expected)


def test_the_qwen2_vl_prompt_shows_one_image_pad_per_merged_patch_between_the_vision_tokens(saved):
    policy = load_policy(_config(saved, "qwen2_vl"), device=HOST)
    ids = _prompts(policy, seeds=(0,))[0]
    tokens = policy.tokenizer.convert_ids_to_tokens(list(ids))
    start = tokens.index("<|vision_start|>")
    grid = policy.image_input.image_processor([ids.pixels[0]])["image_grid_thw"][0]
    pads = int(grid.prod()) // 4  # merged 2 x 2
    assert tokens[start + 1 : start + 2 + pads] == ["<|image_pad|>"] * pads + ["<|vision_end|>"]
    assert tokens[:start] == list("<|im_start|>user\n") and ids.pixels.shape == (1, 16, 16, 3)


def test_generation_log_probs_equal_the_training_forward_s_on_prompts_with_pictures(policy):
    text_only = _builder(policy).ids(get_task("countdown").generate(0, "easy"))  # a text task in the same batch
    prompts = _prompts(policy) + [text_only]
    torch.manual_seed(0)
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    gens = backend.generate([p for p in prompts for _ in range(2)], max_new_tokens=8, temperature=1.0)
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    for i, gen in enumerate(gens):
        assert torch.allclose(logp[i][batch.loss_mask[i].bool()], torch.tensor(gen.logprobs), atol=1e-5)


@pytest.mark.parametrize("qwen", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen2_vl_training_forward_takes_the_model_s_own_m_rope_positions(saved, qwen):
    policy = load_policy(_config(saved, qwen), device=HOST)
    prompt = _prompts(policy, seeds=(0,))[0]
    response = policy.tokenizer("7</answer>", add_special_tokens=False).input_ids
    batch = collate([(prompt, response)], policy.tokenizer.pad_token_id)
    pictures = PictureForward.of(policy.model).pixel_inputs([prompt.pixels], HOST)
    ids = batch.input_ids
    types = (ids == policy.model.config.image_token_id).int()
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
        # the model's own forward computes its M-RoPE positions itself (get_rope_index from the token types)
        logits = policy.model(input_ids=ids, mm_token_type_ids=types, **pictures).logits[0, :-1]
    own = torch.log_softmax(logits.float(), -1).gather(1, ids[0, 1:, None]).squeeze(1)
    mask = batch.loss_mask[0].bool()
    assert torch.allclose(logp[0][mask], own[mask], atol=1e-5)


def test_image_tokens_are_masked_from_the_loss_and_never_sampled(policy, family):
    prompts = _prompts(policy)
    torch.manual_seed(1)
    gens = TransformersBackend(policy.model, policy.tokenizer, device=HOST).generate(prompts, max_new_tokens=12)
    vision = set(policy.tokenizer.convert_tokens_to_ids(list(VISION_TOKENS[family])))
    assert not any(vision & set(g.completion_ids) for g in gens)
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    targets = batch.input_ids[:, 1:]
    image = targets == policy.image_input.token_id
    assert image.any() and not batch.loss_mask[image].any()
    with torch.no_grad():
        hidden = torch.zeros(1, policy.model.get_output_embeddings().in_features)
        logits = policy.model.get_output_embeddings()(hidden)
    assert all(float(logits[0, t]) == BLOCKED_LOGIT for t in vision)


def test_a_micro_batched_sft_step_on_prompts_with_pictures_trains_the_vision_tower_and_the_lm(saved, family):
    policy = load_policy(_config(saved, family), device=HOST)
    prompts = _prompts(policy)
    answers = [policy.tokenizer("<answer>1</answer>", add_special_tokens=False).input_ids for _ in prompts]
    params = [p for p in policy.model.parameters() if p.requires_grad]
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    optimizer = torch.optim.SGD(params, lr=0.1)
    pad = policy.tokenizer.pad_token_id
    whole = sft_step(
        policy.model, torch.optim.SGD(params, lr=0.0), params, pad, list(zip(prompts, answers)), None, HOST
    )
    loss = sft_step(policy.model, optimizer, params, pad, list(zip(prompts, answers)), 1, HOST)  # a row at a time
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])}
    vision = "model.vision_model." if family == "idefics3" else "model.visual."
    assert loss == pytest.approx(whole, rel=1e-5)
    assert any(n.startswith(vision) for n in changed) and "lm_head.weight" in changed


def test_lora_adapts_only_the_language_model_and_reloads(saved, family, tmp_path):
    policy = load_policy(_config(saved, family, lora={"enabled": True, "r": 4}), device=HOST)
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    text_model = "text_model" if family == "idefics3" else "language_model"
    assert trainable and all("lora_" in n and f".{text_model}." in n for n in trainable)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)  # an adapter that changes the outputs
    prompts = _prompts(policy, seeds=(0,))
    batch = collate([(prompts[0], [5, 6, 7])], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    policy.save(tmp_path / "model")
    for config in (
        ModelConfig(path=str(tmp_path / "model"), images=FAMILIES[family][1].get("images", {})),
        _config(saved, family, lora={"adapter": str(tmp_path / "model" / "adapter")}),
    ):
        back = load_policy(config, device=HOST)
        assert back.modalities == TEXT_AND_IMAGES
        with torch.no_grad():
            again, _ = sequence_logprobs(back.model, batch)
        assert torch.allclose(again, logp, atol=1e-5)


def test_a_prompt_with_more_pictures_than_allowed_is_refused_in_one_line(saved, family):
    policy = load_policy(
        _config(saved, family, images={**FAMILIES[family][1].get("images", {}), "max_per_prompt": 1}), device=HOST
    )
    problem = get_task("count_shapes").generate(0, "easy")
    problem.images.append(problem.images[0])
    with pytest.raises(UserError, match=r"shows 2 pictures, more than model.images.max_per_prompt \(1\)"):
        _builder(policy).ids(problem)


def test_the_packed_forward_is_refused_for_a_vision_language_model(saved, family):
    with pytest.raises(UserError, match=r"model.forward: packed cannot run .* a Hugging Face vision-language model"):
        load_policy(_config(saved, family, forward="packed"), device=HOST)


def test_a_vlm_whose_processor_has_no_chat_template_is_refused(saved, tmp_path):
    import shutil

    copy = shutil.copytree(saved["qwen2_vl"], tmp_path / "m")
    (copy / "chat_template.jinja").unlink()
    with pytest.raises(UserError, match="its processor has no chat template"):
        load_policy(ModelConfig(path=str(copy), images={"size": 16}), device=HOST)


def test_a_chat_template_that_shows_no_picture_is_refused(saved, tmp_path):
    import shutil

    copy = shutil.copytree(saved["qwen2_vl"], tmp_path / "m")
    (copy / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'] }}{% endfor %}")
    with pytest.raises(UserError, match="its chat template does not take images"):
        load_policy(ModelConfig(path=str(copy), images={"size": 16}), device=HOST)


@pytest.mark.parametrize(
    ("family", "size", "message"),
    [
        ("idefics3", 64, "an Idefics3 model encodes pictures at its vision encoder's size 32"),
        ("qwen2_vl", 20, r"model.images.size 20 is not a multiple of 8 \(patch_size × merge_size\)"),
    ],
)
def test_a_picture_size_the_model_cannot_take_is_refused(saved, family, size, message):
    with pytest.raises(UserError, match=message):
        load_policy(ModelConfig(path=str(saved[family]), images={"size": size}), device=HOST)


def test_a_vision_language_model_of_another_family_is_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llava"}')
    with pytest.raises(UserError, match="is a llava vision-language model; polyrl drives the families idefics3"):
        load_policy(ModelConfig(path=str(tmp_path)), device=HOST)


def test_prompts_of_the_same_text_and_other_pictures_generate_as_two(policy):
    prompt = _prompts(policy, seeds=(0,))[0]
    other = ImageIds(list(prompt), 255 - prompt.pixels, b"other")
    with torch.no_grad():
        batch = collate([(prompt, [5]), (other, [5])], policy.tokenizer.pad_token_id)
        logp, _ = sequence_logprobs(policy.model, batch)
    assert not torch.equal(logp[0], logp[1])


def test_the_prompt_limit_of_a_vision_language_model_is_its_language_model_s_positions(policy):
    from polyrl.policy.model_files import model_positions

    assert model_positions(policy.model) == 512


def test_rows_that_finish_early_leave_the_decode_and_the_others_still_score_as_in_training(policy):
    prompts = _prompts(policy)
    torch.manual_seed(2)
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    backend._eos = list(range(len(policy.tokenizer) // 2, len(policy.tokenizer)))  # half the vocabulary ends a row
    gens = backend.generate([p for p in prompts for _ in range(4)], max_new_tokens=10)
    assert len({len(g.completion_ids) for g in gens}) > 2  # rows left the decode at different steps
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    for i, gen in enumerate(gens):
        assert torch.allclose(logp[i][batch.loss_mask[i].bool()], torch.tensor(gen.logprobs), atol=1e-5)


def test_a_type_transformers_also_loads_as_a_causal_lm_is_not_taken_for_a_vision_language_model(tmp_path):
    from polyrl.policy.hf_vision import model_type

    (tmp_path / "config.json").write_text('{"model_type": "gemma3"}')  # image-text-to-text and a causal LM
    assert model_type(tmp_path) is None


def test_idefics3_pictures_take_the_vision_encoder_s_size_whatever_the_image_processor_says(saved, tmp_path):
    import json
    import shutil

    copy = shutil.copytree(saved["idefics3"], tmp_path / "m")
    settings = json.loads((copy / "processor_config.json").read_text())
    settings["image_processor"]["max_image_size"] = {"longest_edge": 64}  # would be 16 image tokens a picture
    (copy / "processor_config.json").write_text(json.dumps(settings))
    policy = load_policy(ModelConfig(path=str(copy)), device=HOST)
    prompts = _prompts(policy, seeds=(0,))
    gens = TransformersBackend(policy.model, policy.tokenizer, device=HOST).generate(prompts, max_new_tokens=3)
    assert len(gens[0].completion_ids) == 3
