"""``polyrl tasks …``: list, show, sample, export, score, check-leakage."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from polyrl.errors import UserError
from polyrl.tasks import get_task, list_tasks
from polyrl.tasks.answers import DEFAULT_ANSWER_STYLE
from polyrl.tasks.base import DEFAULT_DIFFICULTY, SPLITS, Problem

app = typer.Typer(help="Browse, sample, export and score verifiable tasks.", no_args_is_help=True)
console = Console()

SPLIT_HELP = "Seed space: train or eval."
CONFIG_HELP = "A training config whose dataset tasks become available by name."


def _register_datasets(config: Path | None) -> None:
    if config is not None:
        from polyrl.tasks.dataset import load_config_datasets

        load_config_datasets(config)


def _say(text: str) -> None:
    """Print user data verbatim: prompts may contain [brackets] that rich would read as markup."""
    console.print(Text(text), soft_wrap=True)


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}: use train or eval")
    return split


def _difficulty(value: str):
    """A CLI difficulty: a knob, a preset, or JSON parameters like '{"digits": 3}'."""
    if value.lstrip().startswith("{"):
        try:
            params = json.loads(value)
        except json.JSONDecodeError:
            raise UserError(f"difficulty {value!r} is not valid JSON parameters") from None
        if not isinstance(params, dict):
            raise UserError(f"difficulty {value!r} must be a JSON object of parameters")
        return params
    return value


@app.command("list")
def list_cmd(
    category: str = typer.Option(None, help="Only tasks of this category."),
    rg: bool = typer.Option(False, "--rg", help="Include the reasoning-gym datasets (rg/<name>)."),
) -> None:
    """A table of the registered tasks."""
    tasks = list_tasks(category, include_rg=rg)
    table = Table(title=f"{len(tasks)} tasks")
    table.add_column("name", no_wrap=True)
    table.add_column("category", no_wrap=True)
    table.add_column("difficulty parameters")
    table.add_column("description")
    for cls in tasks:
        params = ", ".join(p.name for p in cls.params) or "-"
        table.add_row(Text(cls.name), Text(cls.category), Text(params), Text(cls.description))
    console.print(table)


def _example(task, problem: Problem, title: str, image_dir: Path | None = None) -> None:
    console.rule(Text(title))
    if problem.images:
        _say(_shown_images(problem, image_dir))
    _say(problem.prompt)
    reference = task.reference_response(problem)
    _say(f"reference: {reference}" if reference is not None else "reference: (none for this problem)")


def _shown_images(problem: Problem, image_dir: Path | None) -> str:
    """The line that stands for a problem's images: the PNG files written to ``image_dir``, else their sizes."""
    from polyrl.tasks.images import describe_images

    if image_dir is None:
        them = "it" if len(problem.images) == 1 else "them"
        return f"[{describe_images(problem.images)}; polyrl tasks sample --images DIR writes {them} as PNG]"
    paths = []
    for i, image in enumerate(problem.images):
        name = re.sub(r"[^\w.-]", "_", f"{problem.task}_{problem.split}_{problem.seed}_{i}") + ".png"
        image.save(image_dir / name, format="PNG")
        paths.append(str(image_dir / name))
    return "image: " + ", ".join(paths) if len(paths) == 1 else "images: " + ", ".join(paths)


def _image_dir(path: Path | None) -> Path | None:
    """``--images DIR``, made if missing; a path that is a file (or cannot be made) is a UserError."""
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"--images {path}: not a directory") from None
    except OSError as exc:
        raise UserError(f"--images {path}: cannot make the directory ({exc.strerror or exc})") from None
    return path


@app.command("show")
def show_cmd(name: str = typer.Argument(..., help="Task name, e.g. addition or rg/basic_arithmetic.")) -> None:
    """A task's description, difficulty parameters and two medium examples."""
    task = get_task(name)
    console.print(Text(f"{task.name}  ({task.category})", style="bold"))
    _say(task.description or "(no description)")
    space = task.difficulty_space()
    if space.params:
        presets = list(space.presets)
        table = Table("parameter", *presets, "description", title="difficulty (knob 0 = easy … 1 = hard)")
        for row in space.describe():
            table.add_row(Text(row["name"]), *(Text(str(row[k])) for k in presets), Text(row["doc"]))
        console.print(table)
    else:
        _say("difficulty: no parameters (every difficulty gives the same distribution)")
    for seed in (0, 1):
        _example(task, task.generate(seed, "medium", "train"), f"example: seed {seed}, medium, train")


@app.command("sample")
def sample_cmd(
    name: str = typer.Argument(..., help="Task name."),
    difficulty: str = typer.Option(DEFAULT_DIFFICULTY, help="Knob in [0, 1], easy/medium/hard, or JSON parameters."),
    n: int = typer.Option(3, "--n", min=1, help="Number of problems."),
    seed: int = typer.Option(0, help="First seed; problems use seed, seed+1, …"),
    split: str = typer.Option("train", help=SPLIT_HELP),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line (Problem.to_dict)."),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
    images: Path = typer.Option(
        None, "--images", help="Write each problem's images here as PNG files (TASK_SPLIT_SEED_I.png)."
    ),
) -> None:
    """Generate problems and print them with their reference answers (and where their images were written)."""
    _register_datasets(config)
    task = get_task(name)
    _check_split(split)
    image_dir = _image_dir(images)
    for s in range(seed, seed + n):
        problem = task.generate(s, _difficulty(difficulty), split)
        if as_json:
            if image_dir is not None and problem.images:
                _shown_images(problem, image_dir)
            print(json.dumps(problem.to_dict(), ensure_ascii=False))
        else:
            _example(task, problem, problem.id, image_dir)


@app.command("export")
def export_cmd(
    tasks: str = typer.Option(..., help="Comma-separated task names."),
    n: int = typer.Option(..., "--n", min=1, help="Problems per task."),
    out: Path = typer.Option(..., help="Output file, .jsonl or .parquet."),
    split: str = typer.Option("train", help=SPLIT_HELP),
    difficulty: str = typer.Option(DEFAULT_DIFFICULTY, help="Knob in [0, 1], easy/medium/hard, or JSON parameters."),
    seed_start: int = typer.Option(0, help="Seeds are seed_start … seed_start+n-1 for every task."),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Write problems of several tasks to a jsonl or parquet file (loadable with `datasets`)."""
    from polyrl.tasks.io import export_problems, file_format

    _register_datasets(config)
    file_format(out)  # fail on a bad extension before generating anything
    _check_split(split)
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise UserError("--tasks is empty: give comma-separated task names")
    instances = [get_task(t) for t in names]
    level = _difficulty(difficulty)
    problems = [t.generate(s, level, split) for t in instances for s in range(seed_start, seed_start + n)]
    export_problems(out, problems)
    _say(f"wrote {len(problems)} problems ({len(names)} tasks x {n}, {split}, difficulty {difficulty}) to {out}")


@app.command("score")
def score_cmd(
    file: Path = typer.Argument(..., help="A .jsonl/.parquet file of problems with a 'response' column."),
    out: Path = typer.Option(None, help="Also write one verdict per row here (.jsonl or .parquet)."),
    answer_format: str = typer.Option(
        DEFAULT_ANSWER_STYLE, help="How responses mark answers: tags, boxed or last_line."
    ),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Score responses: per-task accuracy, mean score and format compliance."""
    from polyrl.tasks.io import file_format, load_responses, verdict_row, write_rows

    _register_datasets(config)
    if answer_format not in ("tags", "boxed", "last_line"):
        raise UserError(f"unknown answer format {answer_format!r}: use tags, boxed or last_line")
    if out is not None:
        file_format(out)  # fail before scoring, not after
    pairs = load_responses(file)
    if not pairs:
        raise UserError(f"{file}: no rows to score (the file has no rows)")
    instances: dict[str, object] = {}
    stats: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])  # n, correct, score sum, format ok
    rows = []
    for problem, response in pairs:
        if problem.task not in instances:
            instances[problem.task] = get_task(problem.task, answer_format=answer_format)
        verdict = instances[problem.task].verify(problem, response)
        s = stats[problem.task]
        s[0] += 1
        s[1] += verdict.correct
        s[2] += verdict.score
        s[3] += verdict.format_ok
        rows.append(verdict_row(problem, verdict))
    table = Table(title=f"{file} ({len(pairs)} responses)")
    table.add_column("task", no_wrap=True)
    for column in ("n", "accuracy", "mean score", "format ok"):
        table.add_column(column, justify="right")
    for name in sorted(stats):
        count, correct, total, fmt = stats[name]
        table.add_row(Text(name), str(count), f"{correct / count:.3f}", f"{total / count:.3f}", f"{fmt / count:.3f}")
    console.print(table)
    if out is not None:
        write_rows(out, rows)
        _say(f"wrote {len(rows)} verdicts to {out}")


@app.command("check-leakage")
def check_leakage_cmd(
    a: Path = typer.Argument(..., help="First exported problem file (e.g. train)."),
    b: Path = typer.Argument(..., help="Second exported problem file (e.g. eval)."),
    fail: bool = typer.Option(False, "--fail", help="Exit with code 1 when any prompt is shared."),
) -> int:
    """Report prompts that occur in both problem files."""
    from polyrl.tasks.io import load_problems
    from polyrl.tasks.leakage import find_leakage

    leak = find_leakage(load_problems(a), load_problems(b))
    if not leak.shared_prompts:
        _say(f"no leakage: no prompt of {a} occurs in {b}")
        return 0
    _say(
        f"LEAKAGE: {leak.shared_prompts} distinct prompts occur in both files "
        f"({leak.rows_a} rows of {a}, {leak.rows_b} rows of {b})"
    )
    for id_a, id_b, prompt in leak.examples:
        question = prompt.splitlines()[0] if prompt.strip() else prompt
        _say(f"  {id_a}  =  {id_b}\n    {question[:120]}")
    if fail:
        raise typer.Exit(1)
    return 0
