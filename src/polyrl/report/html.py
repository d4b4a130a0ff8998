"""``polyrl report``: one self-contained HTML page for a run directory (finished, in progress, or SFT only).

The page embeds its plots as base64 PNG (it can be mailed or attached as one file); the same PNGs are also
written next to it for slides and docs.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from pathlib import Path
from typing import Any

import yaml

from polyrl.errors import UserError
from polyrl.eval.heldout import comparison_rows
from polyrl.report import panels, plots, series
from polyrl.report.samples import proposals_section, samples_section
from polyrl.report.series import Omitted
from polyrl.run_dir import RunDir, atomic_write_text
from polyrl.yaml_files import describe, safe_load

CSS = """
body{margin:0;background:#f5f6f8;color:#1f2430;font:15px/1.5 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 24px 60px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:34px 0 12px;padding-bottom:6px;border-bottom:1px solid #dde1e6}
.sub{color:#5b6473;margin:0 0 20px}.sub code{background:#e9ecf0;padding:1px 6px;border-radius:4px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px}
.card{background:#fff;border:1px solid #e1e4e8;border-radius:10px;padding:12px 16px}
.card .k{color:#5b6473;font-size:12px;text-transform:uppercase;letter-spacing:.04em}.card .v{font-size:22px;font-weight:600}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:13px;font-weight:600}
.done{background:#e3f4e8;color:#1d6b34}.running{background:#fff3d6;color:#8a5a00}.sftonly{background:#e6ecf7;color:#2d4d86}
figure{margin:0 0 18px;background:#fff;border:1px solid #e1e4e8;border-radius:10px;padding:12px}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}figcaption{color:#5b6473;font-size:13px;margin-top:6px}
table{border-collapse:collapse;background:#fff;border:1px solid #e1e4e8;border-radius:10px;overflow:hidden;font-size:14px}
th,td{padding:7px 14px;text-align:right;border-bottom:1px solid #eef0f3}th{background:#f0f2f5;font-weight:600}
td:first-child,th:first-child{text-align:left}tr.mean td{font-weight:700;background:#fafbfc}
.up{color:#1d6b34}.down{color:#b42318}
pre{background:#1f2430;color:#e6e9ef;padding:16px;border-radius:10px;overflow:auto;font-size:13px;line-height:1.45}
.note{color:#5b6473;font-style:italic}
details.samples{background:#fff;border:1px solid #e1e4e8;border-radius:10px;margin:0 0 10px;padding:8px 12px}
details.samples summary{cursor:pointer;font-weight:600}
table.samples{width:100%;margin-top:8px;table-layout:fixed;font-size:13px}
table.samples th,table.samples td{text-align:left;vertical-align:top;overflow-wrap:anywhere}
table.samples th:nth-child(1){width:14%}table.samples th:nth-child(2),table.samples th:nth-child(3){width:7%}
table.samples th:nth-child(4){width:10%}
table.samples td.text div{white-space:pre-wrap;overflow-wrap:anywhere;max-height:14em;overflow:auto;
font:12px/1.4 ui-monospace,'DejaVu Sans Mono',monospace}
table.samples td.text div.images{max-height:none;white-space:normal}
img.problem{image-rendering:pixelated;margin:0 6px 6px 0;border:1px solid #e1e4e8}
"""


DPI = 110


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plots.plt.close(fig)
    return buffer.getvalue()


def _png_width(data: bytes) -> int:
    """Pixel width from the PNG header (IHDR: bytes 16-20, big-endian)."""
    return int.from_bytes(data[16:20], "big")


def load_run(run_dir: Path) -> dict[str, Any]:
    """What the report reads: config (text and parsed), metrics by stage, held-out results."""
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{str(run_dir)!r} is not a polyrl run directory (no config.yaml)")
    config_text = (run_dir / "config.yaml").read_text()
    try:
        config = safe_load(config_text) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{run_dir / 'config.yaml'}: {describe(exc)}") from None
    if not isinstance(config, dict):
        raise UserError(f"{run_dir / 'config.yaml'} is not a polyrl config (not a mapping)")
    # a record the report can place: an object with a stage and an integer step (anything else is skipped)
    records = [r for r in RunDir(run_dir).read_metrics() if isinstance(r, dict) and isinstance(r.get("step"), int)]
    evals = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        try:
            evals[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue  # being written by a live run; the next report will have it
    listed = config.get("tasks") if isinstance(config.get("tasks"), list) else []
    tasks = [str(t["name"]) for t in listed if isinstance(t, dict) and "name" in t]
    return {
        "config_text": config_text,
        "config": config,
        "evals": evals,
        "tasks": tasks,
        "sft": [r for r in records if r.get("stage") == "sft"],
        "rl": [r for r in records if r.get("stage") == "rl"],
        "updated": (run_dir / "metrics.jsonl").stat().st_mtime if (run_dir / "metrics.jsonl").exists() else None,
    }


def planned_steps(config: dict[str, Any]) -> tuple[int, int]:
    """(SFT steps, RL steps) the run's config asks for: 0 for a stage that is off. The report shows only the
    stages that run (issue #36): no SFT column, card or section when SFT is off, no RL ones when RL is."""
    sft, rl = config.get("sft", {}), config.get("rl", {})
    sft = sft if isinstance(sft, dict) else {}
    rl = rl if isinstance(rl, dict) else {}
    return (
        sft.get("steps", 0) if sft.get("enabled", True) else 0,
        rl.get("steps", 0) if rl.get("enabled", True) else 0,
    )


def first_eval_label(config: dict[str, Any]) -> str:
    """What the first held-out evaluation (``eval/after_sft.json``) is of: the SFT model, or, with SFT off,
    the model RL starts from."""
    return "after SFT" if planned_steps(config)[0] else "before RL"


def run_status(run: dict[str, Any]) -> tuple[str, str]:
    """(css class, text): finished, SFT only, or where an unfinished run stands."""
    sft_total, rl_total = planned_steps(run["config"])
    sft_done = max((r["step"] for r in run["sft"]), default=0)
    rl_done = max((r["step"] for r in run["rl"]), default=0)
    if rl_total == 0:
        if "after_sft" in run["evals"]:
            return "sftonly", "finished · SFT only (no RL configured)"
        return "running", f"unfinished · SFT step {sft_done}/{sft_total}"
    if "after_rl" in run["evals"]:
        return "done", "finished"
    if rl_done or not sft_total:
        return "running", f"unfinished · RL step {rl_done}/{rl_total}"
    return "running", f"unfinished · SFT step {sft_done}/{sft_total}" + (
        " · evaluating" if sft_done >= sft_total else ""
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def heldout_table(evals: dict[str, Any], first: str = "after SFT") -> str:
    """Accuracy per task after the first evaluation (labelled ``first``) and after RL, with the difference
    (rows as :func:`~polyrl.eval.heldout.comparison_rows` gives them), and pass@k of the last one."""
    before, after = evals.get("after_sft"), evals.get("after_rl")
    if before is None:
        when = "after SFT" if first == "after SFT" else "before RL starts"
        return f'<p class="note">No held-out evaluation yet (it runs {when}).</p>'
    extra = [m for m in next(iter(before.values()), {}) if m.startswith("pass@")]
    head = f"<tr><th>task</th><th>{first}</th>" + ("<th>after RL</th><th>Δ (points)</th>" if after else "")
    head += "".join(f"<th>{html.escape(m)} {'after RL' if after else first}</th>" for m in extra) + "</tr>"
    rows = []
    for task, b, a, d in comparison_rows(before, after or {}):
        cells = [f"<td>{html.escape(task)}</td>", f"<td>{_pct(b)}</td>"]
        if after:
            cls = "" if d is None or abs(d) < 0.0005 else ("up" if d > 0 else "down")
            cells += [f"<td>{_pct(a)}</td>", f'<td class="{cls}">{"–" if d is None else f"{100 * d:+.1f}"}</td>']
        final = (after if after else before).get(task, {})
        cells += [f"<td>{_pct(final.get(m))}</td>" for m in extra]
        rows.append(f'<tr class="{"mean" if task == "mean" else ""}">{"".join(cells)}</tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _cards(run: dict[str, Any], status: tuple[str, str]) -> str:
    evals = run["evals"]
    mean = lambda name: evals.get(name, {}).get("mean", {}).get("accuracy")
    sft, rl = planned_steps(run["config"])
    items = [
        ("status", f'<span class="badge {status[0]}">{html.escape(status[1])}</span>'),
        ("tasks", str(len(run["tasks"]))),
        *([("SFT steps", str(max((r["step"] for r in run["sft"]), default=0)))] if sft else []),
        *([("RL steps", str(max((r["step"] for r in run["rl"]), default=0)))] if rl else []),
        (f"held-out {first_eval_label(run['config'])}", _pct(mean("after_sft"))),
        *([("held-out after RL", _pct(mean("after_rl")))] if rl else []),
    ]
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="k">{k}</div><div class="v">{v}</div></div>' for k, v in items)
        + "</div>"
    )


def _omitted_note(omitted: list[Omitted]) -> str:
    if not omitted:
        return ""
    items = "; ".join(f"{html.escape(o.title)}: {html.escape(o.reason)}" for o in omitted)
    return f'<p class="note">Not drawn — {items}.</p>'


def _figure_html(key: str, data: bytes, caption: str, titles: list[str]) -> str:
    listed = f" Panels: {html.escape(' · '.join(titles))}." if titles else ""
    return (
        f'<figure id="fig-{key}"><img alt="{key}" width="{_png_width(data)}" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        f"<figcaption>{caption}{listed}</figcaption></figure>"
    )


Section = tuple[str, str, list[tuple[str, Any, str, list[str]]], str]
"""(title, HTML before the figures, [(png key, figure or None, caption, panel titles)], note after them)."""


def _titles(ps: list[panels.Panel]) -> list[str]:
    return [p.title for p in ps]


def _heldout_section(run: dict[str, Any], rl_done: int) -> Section:
    """The held-out table, the bars of the first and the after-RL evaluations, the periodic ones during RL."""
    first = first_eval_label(run["config"])
    stages = ("after the SFT warm start" if first == "after SFT" else first) + (
        " and after RL" if planned_steps(run["config"])[1] else ""
    )
    return (
        "Held-out results",
        heldout_table(run["evals"], first) + "<div style='height:14px'></div>",
        [
            (
                "heldout",
                plots.heldout_bars(run["evals"], first=first),
                f"Greedy accuracy on the eval split, {stages}.",
                [],
            ),
            (
                "heldout_steps",
                plots.heldout_over_time(run["evals"], rl_done),
                "Periodic held-out evaluations during RL.",
                [],
            ),
        ],
        "",
    )


def _training_section(rl: list[dict[str, Any]], tasks: list[str], config: dict[str, Any]) -> Section:
    """Per-task training curves and the reward terms, with a note naming the panels left out."""
    per_task, per_task_off = panels.select(panels.PER_TASK, rl, tasks, config)
    terms, terms_off = panels.select(panels.term_panels(rl, tasks), rl, tasks, config)
    return (
        "Training curves",
        "",
        [
            (
                "training",
                plots.per_task_curves(rl, tasks, per_task),
                "Per task, on the RL training batches: smoothed lines, raw values faint; black: all tasks.",
                _titles(per_task),
            ),
            (
                "reward_terms",
                plots.overlay_curves(rl, terms),
                "All tasks: the mean weighted value of each reward term"
                + ("; how many completions each term failed to score." if len(terms) > 1 else "."),
                _titles(terms),
            ),
        ],
        _omitted_note(per_task_off + terms_off),
    )


def _diagnostics_section(rl: list[dict[str, Any]], tasks: list[str], config: dict[str, Any]) -> Section:
    """What the policy-gradient objective computed at each step."""
    diagnostics, diagnostics_off = panels.select(panels.DIAGNOSTICS, rl, tasks, config)
    return (
        "Objective diagnostics",
        "",
        [
            (
                "diagnostics",
                plots.overlay_curves(rl, diagnostics),
                "What the policy-gradient objective computed "
                "at each RL step (all tasks): smoothed lines, raw values faint.",
                _titles(diagnostics),
            ),
        ],
        _omitted_note(diagnostics_off),
    )


def _curriculum_section(rl: list[dict[str, Any]], tasks: list[str]) -> Section:
    """Sampler weights, difficulty knobs and where the problems came from."""
    return (
        "Curriculum",
        "",
        [
            (
                "curriculum",
                plots.curriculum(rl, tasks),
                "How often the sampler drew each task, and each task's difficulty knob.",
                [],
            ),
            (
                "sources",
                plots.problem_sources(rl),
                "Where each step's problems came from (share of its completions: generated, dataset, "
                "synthesized near failures, replayed failures, proposed by the policy in self-play) and the "
                "sampler's record of failed problems.",
                [],
            ),
        ],
        "",
    )


def _selfplay_sections(rl: list[dict[str, Any]], tasks: list[str], config: dict[str, Any]) -> list[Section]:
    """The self-play section, or none when the run logged no self-play metrics."""
    selfplay, selfplay_off = panels.select(panels.selfplay_panels(rl), rl, tasks, config)
    if not selfplay:
        return []
    figure = (
        "selfplay",
        plots.overlay_curves(rl, selfplay),
        "The proposer's valid share and learnability reward, the solver's success rate on the proposed "
        "problems (p; a valid proposal's reward is a function of p), the proposals' difficulty and why "
        "invalid ones were rejected — over every proposal of the step.",
        _titles(selfplay),
    )
    return [("Self-play", "", [figure], _omitted_note(selfplay_off) + proposals_section(rl))]


def _sections(run: dict[str, Any], tasks: list[str]) -> list[Section]:
    """Each plotted section of the report, in order."""
    rl, config = run["rl"], run["config"]
    rl_done = max((r["step"] for r in rl), default=0)
    if not planned_steps(config)[1]:  # RL is off: no RL section would ever hold anything
        return [_heldout_section(run, rl_done)]
    return [
        _heldout_section(run, rl_done),
        _training_section(rl, tasks, config),
        _diagnostics_section(rl, tasks, config),
        _curriculum_section(rl, tasks),
        *_selfplay_sections(rl, tasks, config),
    ]


def build_report(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, list[Path]]:
    """Write the HTML report (default ``RUN_DIR/report.html``) and its PNGs; return their paths."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {str(out)!r} must end in .html")
    out.parent.mkdir(parents=True, exist_ok=True)
    tasks = series.task_names(run["tasks"], run["rl"])
    status = run_status(run)
    name = html.escape(run_dir.resolve().name)
    updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(run["updated"])) if run["updated"] else "never"
    body = [
        f"<h1>polyrl run · {name}</h1>",
        f'<p class="sub"><code>{html.escape(str(run_dir))}</code> · metrics last written {updated} · report made '
        f"{time.strftime('%Y-%m-%d %H:%M')}</p>",
        _cards(run, status),
    ]
    written = []

    def figures(entries) -> list[str]:
        parts = []
        for key, fig, caption, titles in entries:
            if fig is None:
                continue
            data = _png(fig)
            png = out.with_name(f"{out.stem}_{key}.png")
            png.write_bytes(data)
            written.append(png)
            parts.append(_figure_html(key, data, caption, titles))
        return parts

    for title, lead, entries, note in _sections(run, tasks):
        drawn = figures(entries)
        body += [f"<h2>{title}</h2>", lead, *drawn]
        nothing = "" if drawn or lead else '<p class="note">Nothing logged yet for this section.</p>'
        body.append(note or nothing)  # a section whose every panel is off still says which and why
    sft_steps, rl_steps = planned_steps(run["config"])
    if rl_steps:
        samples = samples_section(run["rl"])
        body += [
            '<h2 id="samples">Samples</h2>',
            samples or '<p class="note">No completions logged (RL records carry them as <code>samples</code>).</p>',
        ]
    if sft_steps:
        body.append("<h2>SFT warm start</h2>")
        body += figures([("sft", plots.sft_loss(run["sft"]), "Cross-entropy on reference solutions.", [])]) or [
            '<p class="note">Nothing logged yet for this section.</p>'
        ]
    body += ["<h2>Resolved config</h2>", f"<pre>{html.escape(run['config_text'])}</pre>"]
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>polyrl run {name}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )
    atomic_write_text(out, page)
    return out, written
