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
from polyrl.report import plots
from polyrl.run_dir import RunDir, atomic_write_text

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
"""


DPI = 110


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plots.plt.close(fig)
    return buffer.getvalue()


def load_run(run_dir: Path) -> dict[str, Any]:
    """What the report reads: config (text and parsed), metrics by stage, held-out results."""
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{str(run_dir)!r} is not a polyrl run directory (no config.yaml)")
    config_text = (run_dir / "config.yaml").read_text()
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError:
        raise UserError(f"{run_dir / 'config.yaml'} is not valid YAML") from None
    records = RunDir(run_dir).read_metrics()
    evals = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        try:
            evals[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue  # being written by a live run; the next report will have it
    tasks = [t["name"] for t in config.get("tasks", []) if isinstance(t, dict) and "name" in t]
    return {
        "config_text": config_text,
        "config": config,
        "evals": evals,
        "tasks": tasks,
        "sft": [r for r in records if r.get("stage") == "sft"],
        "rl": [r for r in records if r.get("stage") == "rl"],
        "updated": (run_dir / "metrics.jsonl").stat().st_mtime if (run_dir / "metrics.jsonl").exists() else None,
    }


def run_status(run: dict[str, Any]) -> tuple[str, str]:
    """(css class, text): finished, SFT only, or where an unfinished run stands."""
    cfg = run["config"]
    sft_cfg, rl_cfg = cfg.get("sft", {}), cfg.get("rl", {})
    sft_total = sft_cfg.get("steps", 0) if sft_cfg.get("enabled", True) else 0
    rl_total = rl_cfg.get("steps", 0) if rl_cfg.get("enabled", True) else 0
    sft_done = max((r["step"] for r in run["sft"]), default=0)
    rl_done = max((r["step"] for r in run["rl"]), default=0)
    if rl_total == 0:
        if "after_sft" in run["evals"]:
            return "sftonly", "finished · SFT only (no RL configured)"
        return "running", f"unfinished · SFT step {sft_done}/{sft_total}"
    if "after_rl" in run["evals"]:
        return "done", "finished"
    if rl_done:
        return "running", f"unfinished · RL step {rl_done}/{rl_total}"
    return "running", f"unfinished · SFT step {sft_done}/{sft_total}" + (
        " · evaluating" if sft_done >= sft_total else ""
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def heldout_table(evals: dict[str, Any]) -> str:
    before, after = evals.get("after_sft"), evals.get("after_rl")
    if before is None:
        return '<p class="note">No held-out evaluation yet (it runs after SFT).</p>'
    extra = [m for m in next(iter(before.values())) if m.startswith("pass@")]
    head = "<tr><th>task</th><th>after SFT</th>" + ("<th>after RL</th><th>Δ (points)</th>" if after else "")
    head += "".join(f"<th>{html.escape(m)} {'after RL' if after else 'after SFT'}</th>" for m in extra) + "</tr>"
    rows = []
    for task, row in before.items():
        b = row.get("accuracy")
        cells = [f"<td>{html.escape(task)}</td>", f"<td>{_pct(b)}</td>"]
        final = after.get(task, {}) if after else row
        if after:
            a = final.get("accuracy")
            d = None if a is None or b is None else 100 * (a - b)
            cls = "" if d is None or abs(d) < 0.05 else ("up" if d > 0 else "down")
            cells += [f"<td>{_pct(a)}</td>", f'<td class="{cls}">{"–" if d is None else f"{d:+.1f}"}</td>']
        cells += [f"<td>{_pct(final.get(m))}</td>" for m in extra]
        rows.append(f'<tr class="{"mean" if task == "mean" else ""}">{"".join(cells)}</tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _cards(run: dict[str, Any], status: tuple[str, str]) -> str:
    evals = run["evals"]
    mean = lambda name: evals.get(name, {}).get("mean", {}).get("accuracy")
    items = [
        ("status", f'<span class="badge {status[0]}">{html.escape(status[1])}</span>'),
        ("tasks", str(len(run["tasks"]))),
        ("SFT steps", str(max((r["step"] for r in run["sft"]), default=0))),
        ("RL steps", str(max((r["step"] for r in run["rl"]), default=0))),
        ("held-out after SFT", _pct(mean("after_sft"))),
        ("held-out after RL", _pct(mean("after_rl"))),
    ]
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="k">{k}</div><div class="v">{v}</div></div>' for k, v in items)
        + "</div>"
    )


def build_report(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, list[Path]]:
    """Write the HTML report (default ``RUN_DIR/report.html``) and its PNGs; return their paths."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {str(out)!r} must end in .html")
    out.parent.mkdir(parents=True, exist_ok=True)
    tasks = run["tasks"] or sorted({k.split("/", 1)[1] for r in run["rl"] for k in r if k.startswith("reward/")})
    rl_done = max((r["step"] for r in run["rl"]), default=0)
    figures = [
        (
            "heldout",
            "Held-out results",
            plots.heldout_bars(run["evals"]),
            "Greedy accuracy on the eval split, after the SFT warm start and after RL.",
        ),
        (
            "heldout_steps",
            None,
            plots.heldout_over_time(run["evals"], rl_done),
            "Periodic held-out evaluations during RL.",
        ),
        (
            "training",
            "Training curves",
            plots.training_curves(run["rl"], tasks),
            "Per task, on the RL training batches: smoothed lines, raw values faint; black: all tasks.",
        ),
        (
            "curriculum",
            "Curriculum",
            plots.curriculum(run["rl"], tasks),
            "How often the sampler drew each task, and each task's difficulty knob.",
        ),
        ("sft", "SFT warm start", plots.sft_loss(run["sft"]), "Cross-entropy on reference solutions."),
    ]
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
    for key, title, fig, caption in figures:
        if title:
            body.append(f"<h2>{title}</h2>")
        if key == "heldout":
            body.append(heldout_table(run["evals"]))
            body.append("<div style='height:14px'></div>")
        if fig is None:
            if title and key != "heldout":
                body.append('<p class="note">Nothing logged yet for this section.</p>')
            continue
        width = int(fig.get_figwidth() * DPI)
        data = _png(fig)
        png = out.with_name(f"{out.stem}_{key}.png")
        png.write_bytes(data)
        written.append(png)
        body.append(
            f'<figure><img alt="{key}" width="{width}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    body += ["<h2>Resolved config</h2>", f"<pre>{html.escape(run['config_text'])}</pre>"]
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>polyrl run {name}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )
    atomic_write_text(out, page)
    return out, written
