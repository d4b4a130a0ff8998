"""Train a Bradley–Terry reward model on preference pairs, and build such pairs from verifiable tasks.

Loss (Bradley & Terry 1952; Ouyang et al. 2022, InstructGPT eq. 1): ``-log σ(r(x, y_chosen) - r(x, y_rejected))``.
Data is any Hugging Face ``datasets`` table with ``prompt``, ``chosen`` and ``rejected`` string columns:
a ``save_to_disk`` directory, or a .jsonl / .json / .parquet / .csv file.
"""

from __future__ import annotations

import random
from pathlib import Path

from polyrl.errors import UserError
from polyrl.rewards.reward_model import REWARD_MODEL_MAX_LENGTH
from polyrl.tasks.base import DEFAULT_DIFFICULTY
from polyrl.tasks.dataset_files import check_local_file

COLUMNS = ("prompt", "chosen", "rejected")
_FILE_TYPES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def load_preferences(path: str | Path):
    """The preference table at ``path``; UserError for a missing file, unknown format or missing columns."""
    import datasets

    p = Path(path)
    try:
        if p.is_dir():
            data = datasets.load_from_disk(str(p))
            if isinstance(data, datasets.DatasetDict):
                data = data["train"] if "train" in data else next(iter(data.values()))
        elif p.is_file():
            kind = _FILE_TYPES.get(p.suffix)
            if kind is None:
                raise UserError(
                    f"preference file {str(path)!r}: use .jsonl, .json, .parquet, .csv or a datasets directory"
                )
            check_local_file(p)  # text that is not UTF-8, a CSV quote left open: one line naming the line
            data = datasets.load_dataset(kind, data_files=str(p), split="train")
        else:
            raise UserError(f"preference data {str(path)!r} does not exist")
    except (OSError, ValueError, datasets.exceptions.DatasetGenerationError) as exc:
        raise UserError(f"cannot read preference data {str(path)!r}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in COLUMNS if c not in data.column_names]
    if missing:
        raise UserError(
            f"preference data {str(path)!r} lacks column(s) {', '.join(missing)} (has {', '.join(data.column_names)})"
        )
    if len(data) < 2:
        raise UserError(f"preference data {str(path)!r} has {len(data)} pair(s); need at least 2 (train and held out)")
    for column in COLUMNS:  # text stored as bytes (a parquet binary column) is UTF-8 text
        if getattr(data.features[column], "dtype", None) in ("binary", "large_binary"):
            try:
                data = data.cast_column(column, datasets.Value("string"))
            except Exception:  # pyarrow.ArrowInvalid: "Invalid UTF8 payload"
                raise UserError(
                    f"preference data {str(path)!r}: column {column!r} holds bytes that are not UTF-8 text"
                ) from None
    return data


def corrupt_answer(answer: str, rng: random.Random) -> str:
    """A different answer of the same shape: one character changed (digits stay digits, letters letters)."""
    if not answer:
        return "0"
    chars = list(answer)
    i = rng.randrange(len(chars))
    c = chars[i]
    pool = "0123456789" if c.isdigit() else ("abcdefghijklmnopqrstuvwxyz" if c.isalpha() else "0123456789")
    chars[i] = rng.choice([x for x in pool if x != c.lower()])
    return "".join(chars)


def build_preference_data(
    task_names: list[str], n: int, seed: int = 0, difficulty=DEFAULT_DIFFICULTY
) -> list[dict[str, str]]:
    """``n`` pairs per task: the verified-correct reference response (chosen) and a corrupted answer that
    the verifier rejects (rejected). Problems without a reference, or whose corruption still verifies,
    are skipped."""
    from polyrl.tasks import get_task

    rng = random.Random(seed)
    rows = []
    for name in task_names:
        task = get_task(name)
        made = tries = 0
        while made < n and tries < 5 * n:
            tries += 1
            problem = task.generate(rng.randrange(2**62), difficulty, split="train")
            chosen = task.reference_response(problem)
            if chosen is None or not task.verify(problem, chosen).correct:
                continue
            answer = task.answer_format.extract(chosen).answer or ""
            rejected = chosen.replace(answer, corrupt_answer(answer, rng), 1) if answer else chosen + "?"
            if task.verify(problem, rejected).correct:
                continue
            rows.append({"prompt": problem.question, "chosen": chosen, "rejected": rejected, "task": name})
            made += 1
    return rows


def save_preferences(rows: list[dict[str, str]], out: str | Path) -> Path:
    import datasets

    p = Path(out)
    data = datasets.Dataset.from_list(rows)
    if p.suffix in (".jsonl", ".json"):
        data.to_json(str(p), lines=True)
    elif p.suffix == ".parquet":
        data.to_parquet(str(p))
    else:
        data.save_to_disk(str(p))
    return p


def train_reward_model(
    data_path: str | Path,
    model_path: str,
    out: str | Path,
    steps: int = 200,
    batch_size: int = 16,
    lr: float = 1e-3,
    heldout_fraction: float = 0.1,
    max_length: int = REWARD_MODEL_MAX_LENGTH,
    seed: int = 0,
    log=print,
    tiny_shape: dict | None = None,
    revision: str | None = None,
) -> dict[str, float]:
    """Train on ``data_path``, save to ``out`` (save_pretrained), return held-out pairwise accuracy and loss;
    ``model_path``: 'tiny' or any model name polyrl resolves (``revision``: a Hub id's branch, tag or commit)."""
    import torch
    import torch.nn.functional as F

    from polyrl.rewards.reward_model import build_tiny_reward_model, encode_pairs

    data = load_preferences(data_path)
    if model_path == "tiny":
        model, tokenizer = build_tiny_reward_model(seed, **(tiny_shape or {}))
    else:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from polyrl.policy.resolve import resolve_model_path

        model_path = resolve_model_path(model_path, revision)
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_path)
            model = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1)
        except (OSError, ValueError) as exc:
            raise UserError(
                f"cannot load {model_path!r} as a sequence classifier: {str(exc).splitlines()[0]}"
            ) from None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
    rows = data.shuffle(seed=seed)
    n_held = max(1, int(len(rows) * heldout_fraction))
    held, train = rows.select(range(n_held)), rows.select(range(n_held, len(rows)))
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def margins(batch) -> torch.Tensor:
        prompts = list(batch["prompt"]) * 2
        ids, mask = encode_pairs(tokenizer, prompts, list(batch["chosen"]) + list(batch["rejected"]), max_length)
        scores = model(input_ids=ids, attention_mask=mask).logits[:, 0]
        return scores[: len(batch["prompt"])] - scores[len(batch["prompt"]) :]

    rng = random.Random(seed)
    model.train()
    for step in range(steps):
        pick = [rng.randrange(len(train)) for _ in range(min(batch_size, len(train)))]
        loss = -F.logsigmoid(margins(train.select(pick)[:])).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log(f"step {step + 1}/{steps} loss {float(loss.detach()):.4f}")
    model.eval()
    with torch.no_grad():
        m = torch.cat([margins(held.select(range(s, min(s + 64, len(held))))[:]) for s in range(0, len(held), 64)])
    result = {
        "heldout_accuracy": float((m > 0).float().mean()),
        "heldout_loss": float(-F.logsigmoid(m).mean()),
        "train_pairs": len(train),
        "heldout_pairs": len(held),
    }
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return result
