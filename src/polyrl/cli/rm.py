"""``polyrl rm``: build preference data from verifiable tasks and train Bradley–Terry reward models."""

from __future__ import annotations

import typer

from polyrl.tasks.base import DEFAULT_DIFFICULTY

app = typer.Typer(help="Reward models: build preference data, train.", no_args_is_help=True)


@app.command("build-data")
def build_data(
    tasks: str = typer.Option(..., "--tasks", help="Comma-separated task names."),
    n: int = typer.Option(200, "--n", help="Pairs per task."),
    out: str = typer.Option(..., "--out", help="Output: a .jsonl/.parquet file, or a datasets directory."),
    seed: int = typer.Option(0, "--seed", help="Problem seed."),
    difficulty: str = typer.Option(DEFAULT_DIFFICULTY, "--difficulty", help="Difficulty preset or knob."),
) -> None:
    """Pairs (prompt, chosen=verified reference, rejected=corrupted answer the verifier rejects)."""
    from polyrl.errors import UserError
    from polyrl.rewards.rm_training import build_preference_data, save_preferences
    from polyrl.tasks import get_task

    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names or n < 1:
        raise UserError("--tasks needs at least one task and --n at least 1")
    for name in names:
        get_task(name)
    knob = float(difficulty) if difficulty.replace(".", "", 1).isdigit() else difficulty
    rows = build_preference_data(names, n, seed, knob)
    if not rows:
        raise UserError(f"no pairs could be built from {', '.join(names)} (tasks without reference solutions?)")
    print(f"{len(rows)} pairs -> {save_preferences(rows, out)}")


@app.command()
def train(
    data: str = typer.Option(
        ..., "--data", help="Preference data (prompt/chosen/rejected): file or datasets directory."
    ),
    model: str = typer.Option(
        "tiny", "--model", help="'tiny', a Hugging Face model directory, a preset name, a .gguf file or a Hub id."
    ),
    revision: str | None = typer.Option(None, "--revision", help="With a Hub id: branch, tag or commit."),
    out: str = typer.Option(..., "--out", help="Directory for the trained reward model."),
    steps: int = typer.Option(200, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(16, "--batch-size", help="Pairs per step."),
    lr: float = typer.Option(1e-3, "--lr", help="Learning rate."),
    seed: int = typer.Option(0, "--seed", help="Seed."),
) -> None:
    """Bradley–Terry training; prints held-out pairwise accuracy."""
    from polyrl.errors import UserError
    from polyrl.rewards.rm_training import train_reward_model

    if steps < 1 or batch_size < 1 or lr <= 0:
        raise UserError("--steps and --batch-size must be at least 1 and --lr positive")
    log = lambda m: print(m, flush=True)
    result = train_reward_model(data, model, out, steps, batch_size, lr, seed=seed, log=log, revision=revision)
    print(
        f"held-out pairwise accuracy {result['heldout_accuracy']:.3f} ({result['heldout_pairs']} pairs), "
        f"loss {result['heldout_loss']:.4f}; saved to {out}"
    )
