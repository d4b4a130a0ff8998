"""`polyrl report`: one self-contained HTML page from a real (seconds-long) run, finished, unfinished or SFT only,
and from a synthetic run directory holding every key the RL step logs (checked in headless Chromium too)."""

import base64
import json
import math
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from system_packages import chromium_path, needs_chromium

from polyrl.cli import run
from polyrl.report import build_report
from polyrl.train.trainer import Trainer


@pytest.fixture
def finished_run(tiny_train_config):
    cfg = tiny_train_config(difficulty_control={"enabled": True, "window": 4}, eval__every=3)
    Trainer(cfg).run()
    return cfg.run_dir


def _embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def test_report_of_a_finished_run_embeds_every_plot_and_writes_them_next_to_it(finished_run, tmp_path, capsys):
    out = tmp_path / "site" / "run.html"
    assert run(["report", finished_run, "--out", str(out)]) == 0
    page = out.read_text()
    pngs = _embedded_pngs(page)
    assert all(p.startswith(b"\x89PNG") for p in pngs)
    names = {p.name for p in out.parent.glob("*.png")}
    assert names == {
        "run_heldout.png",
        "run_heldout_steps.png",
        "run_training.png",
        "run_curriculum.png",
        "run_sft.png",
        "run_reward_terms.png",
        "run_diagnostics.png",
    }
    assert len(pngs) == len(names)
    assert "finished" in page and "after RL" in page and "Resolved config" in page
    before_config = re.sub(r'src="data:[^"]*"', "", page.split("<pre>")[0])  # not the base64 of the plots
    assert "<script" not in page and "http" not in before_config  # self-contained: nothing to fetch
    assert "report:" in capsys.readouterr().out


def test_heldout_table_shows_before_after_and_difference(finished_run, tmp_path):
    page, _ = build_report(finished_run, tmp_path / "r.html")
    evals = {n: json.loads((Path(finished_run) / "eval" / f"{n}.json").read_text()) for n in ("after_sft", "after_rl")}
    b, a = evals["after_sft"]["addition"]["accuracy"], evals["after_rl"]["addition"]["accuracy"]
    row = re.search(r"<td>addition</td>(.*?)</tr>", page.read_text()).group(1)
    assert f"{100 * b:.1f}%" in row and f"{100 * a:.1f}%" in row and f"{100 * (a - b):+.1f}" in row


def test_report_of_an_unfinished_run_says_where_it_stands(finished_run, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(finished_run, live)
    (live / "eval" / "after_rl.json").unlink()
    lines = (live / "metrics.jsonl").read_text().splitlines()
    rl = [i for i, line in enumerate(lines) if '"stage": "rl"' in line]
    (live / "metrics.jsonl").write_text("\n".join(lines[: rl[2] + 1]) + "\n" + lines[rl[3]][:30])  # cut mid-line
    page, _ = build_report(live)
    text = page.read_text()
    assert "unfinished · RL step 3/6" in text
    assert "<th>after SFT</th>" in text and "<th>after RL</th>" not in text  # no final eval yet


def test_report_of_a_run_without_rl_shows_no_rl_sections_or_cards(tiny_train_config, tmp_path):
    cfg = tiny_train_config(rl__enabled=False)
    Trainer(cfg).run()
    page, pngs = build_report(cfg.run_dir)
    text = page.read_text()
    assert "finished · SFT only" in text
    assert {p.name for p in pngs} == {"report_heldout.png", "report_sft.png"}
    headings = re.findall(r"<h2[^>]*>(.*?)</h2>", text)
    assert headings == ["Held-out results", "SFT warm start", "Resolved config"]
    assert "RL steps" not in text and "held-out after RL" not in text


def test_report_of_a_run_without_sft_shows_only_what_ran(tiny_train_config, tmp_path):
    """With SFT off, the first held-out evaluation is of the model RL started from: labelled so, and no SFT
    column, card or section is shown (issue #36)."""
    cfg = tiny_train_config(sft__enabled=False, tensorboard=False)
    Trainer(cfg).run()
    page, pngs = build_report(cfg.run_dir)
    shown = page.read_text().split("<h2>Resolved config</h2>")[0]  # the config itself names its sft section
    # the page's words, without its embedded images (base64 text holds any three letters by chance)
    words = re.sub(r'src="data:[^"]*"', "", shown)
    assert "SFT" not in words
    assert "<th>before RL</th><th>after RL</th>" in shown and "held-out before RL" in shown
    assert "report_sft.png" not in {p.name for p in pngs}
    assert "finished" in shown
    assert "| task | before RL | after RL | Δ |" in (Path(cfg.run_dir) / "summary.md").read_text()


def test_report_of_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path, capsys):
    assert run(["report", str(tmp_path)]) == 2
    assert "not a polyrl run directory" in capsys.readouterr().err


# -- a synthetic run: every key the RL step logs ---------------------------------------------------------------------
SYNTHETIC_TASKS = ("countdown", "rg/basic_arithmetic", "maze_path")
HOSTILE = '</textarea></td></tr></table><script>alert(1)</script><img src=x onerror="alert(2)">'


def write_synthetic_run(path: Path, steps: int = 40, kl_coef: float = 0.0, async_rollouts: bool = False) -> Path:
    """A SYNTHETIC run directory (made-up numbers, no training): ``config.yaml`` and ``metrics.jsonl`` with every key
    the RL step logs, overall and per task, samples every 10 steps (one hostile completion), some values NaN or
    missing. IS-weight keys only under ``async_rollouts``, as the trainer logs them."""
    rng = random.Random(0)
    path.mkdir(parents=True)
    config = {
        "synthetic": "written by tests/eval/test_report.py, not by a training run",
        "tasks": [{"name": t} for t in SYNTHETIC_TASKS],
        "sft": {"steps": 10},
        "rl": {"steps": steps, "kl_coef": kl_coef},
    }
    (path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    lines = [{"stage": "sft", "step": s, "loss": 2.0 / s} for s in range(1, 11)]
    for step in range(1, steps + 1):
        progress = step / steps
        stats = {
            "reward": 0.3 + 0.4 * progress + rng.gauss(0, 0.1),
            "accuracy": 0.2 + 0.5 * progress + rng.gauss(0, 0.1),
            "score": 0.25 + 0.4 * progress,
            "format_rate": 0.9 + 0.1 * progress,
            "response_length": 40 - 10 * progress + rng.gauss(0, 3),
            "truncation_rate": 0.1 * (1 - progress),
            "entropy": math.nan if step == 5 else 1.2 - 0.5 * progress,
            "kl": 0.02 * progress if kl_coef else 0.0,
            "clip_fraction": 0.05 + rng.random() * 0.02,
        }
        record = {"stage": "rl", "step": step, **stats}
        for task in SYNTHETIC_TASKS:
            record.update({f"{k}/{task}": v + rng.gauss(0, 0.05) for k, v in stats.items()})
        record.update(
            {
                "clip_fraction_low": 0.02,
                "clip_fraction_high": 0.04,
                "ratio_mean": 1.0 + rng.gauss(0, 0.01),
                "ratio_max": 1.4 + rng.random() * 0.3,
                "ratio_min": 0.6 + rng.random() * 0.2,
                "grad_norm": 0.5 + rng.random(),
                "loss": rng.gauss(0, 0.05),
                "lr": 1e-4,
                "zero_variance_frac": 0.3,
                "tokens_per_s": 9000 + rng.random() * 500,
                "step_time": 0.4,
                "reward_terms/verifier": stats["reward"],
                "reward_terms/format": 0.1,
                "reward_failures/verifier": 0.0,
            }
        )
        if step != 7:  # a key absent on one step
            record["approx_kl"] = 0.001 * (1 + rng.random())
        if async_rollouts:
            record.update({"tis_weight_mean": 0.97, "tis_truncated_fraction": 0.01 * rng.random()})
        if step % 10 == 0:
            record["samples"] = [
                {
                    "task": t,
                    "prompt": f"Solve {t} #{step}",
                    "completion": f"<answer>{step}</answer>",
                    "reward": 1.0,
                    "correct": True,
                    "reason": "correct",
                }
                for t in SYNTHETIC_TASKS
            ]
            record["samples"].append(
                {"task": "countdown", "prompt": "p", "completion": HOSTILE, "reward": 0.0, "correct": False}
            )
        lines.append(record)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))  # NaN as json writes it
    return path


@pytest.fixture
def synthetic_run(tmp_path):
    return write_synthetic_run(tmp_path / "synthetic")


def _captions(page: str) -> dict[str, str]:
    return dict(re.findall(r'<figure id="fig-([a-z_]+)">.*?<figcaption>(.*?)</figcaption>', page))


def test_report_of_a_synthetic_run_draws_each_logged_diagnostic(synthetic_run):
    page, pngs = build_report(synthetic_run)
    captions = _captions(page.read_text())
    assert set(captions) == {"training", "reward_terms", "diagnostics", "sft"}
    for title in ("clip fraction by side", "approx. KL(old ‖ new), k3", "importance ratio π / π_old", "gradient norm"):
        assert title in captions["diagnostics"]
    for title in ("truncation rate (hit max tokens)", "entropy (nats / token)", "format rate", "clip fraction"):
        assert title in captions["training"]
    assert len(pngs) == 4


def test_the_kl_panel_is_left_out_and_said_so_at_kl_coef_zero(synthetic_run):
    page, _ = build_report(synthetic_run)
    text = page.read_text()
    assert "KL to reference" not in _captions(text)["training"]
    assert "Not drawn — KL to reference: off (rl.kl_coef = 0); reward failures: 0 at every step." in text


def test_is_weight_panels_appear_only_with_asynchronous_rollouts(synthetic_run, tmp_path):
    sync = _captions(build_report(synthetic_run)[0].read_text())["diagnostics"]
    run = write_synthetic_run(tmp_path / "async", kl_coef=0.05, async_rollouts=True)
    text = build_report(run)[0].read_text()
    assert "IS weight" not in sync and "truncated IS weight (mean)" in _captions(text)["diagnostics"]
    assert "KL to reference" in _captions(text)["training"] and "rl.kl_coef" not in text.split("<pre>")[0]


def test_the_samples_section_shows_first_to_last_sampled_step_with_hostile_text_escaped(synthetic_run):
    text = build_report(synthetic_run)[0].read_text()
    assert re.findall(r'<details class="samples" id="samples-step-(\d+)"', text) == ["10", "20", "30", "40"]
    assert '<details class="samples" id="samples-step-40" open>' in text
    assert "<script" not in text and "<img src=x" not in text
    assert "&lt;/textarea&gt;&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text


def _chromium() -> str:
    chromium = chromium_path()
    assert chromium is not None, "chromium is not installed (POLYRL_REQUIRE_SYSTEM=1 forbids skipping)"
    return chromium


def _headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run([chromium, *flags, *args], check=True, capture_output=True, text=True, timeout=120)


@needs_chromium
def test_the_synthetic_report_loads_in_headless_chromium_with_its_panels_and_no_script(synthetic_run, tmp_path):
    chromium = _chromium()
    page, pngs = build_report(synthetic_run)
    loaded = _headless(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    dom = loaded.stdout
    assert "Uncaught" not in loaded.stderr and "CONSOLE" not in loaded.stderr  # no JS error, no console output
    for figure in ("training", "reward_terms", "diagnostics", "sft"):
        assert f'id="fig-{figure}"' in dom
    assert "<script" not in dom  # the parsed page: the hostile completion stayed text
    assert dom.count("<img") == len(pngs)
    assert dom.count('<details class="samples"') == 4 and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom


@needs_chromium
def test_report_renders_in_headless_chromium(finished_run, tmp_path):
    chromium = _chromium()
    import matplotlib.image

    page, _ = build_report(finished_run, tmp_path / "r.html")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",  # Chromium refuses to run as root with its own sandbox
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=1280,1800",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (1800, 1280)
    # a rendered page: plots and text give many distinct colours, not a blank or error page
    assert len({tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3).tolist()}) > 50


def test_records_the_report_cannot_place_are_skipped(synthetic_run):
    with open(synthetic_run / "metrics.jsonl", "a") as f:
        f.write('[1, 2]\n"text"\n{"stage": "rl"}\n{"stage": "rl", "step": "41", "reward": 9}\n')
    text = build_report(synthetic_run)[0].read_text()
    assert "RL step 40/40" in text


def test_a_config_that_is_not_a_mapping_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("- just\n- a list\n")
    assert run(["report", str(tmp_path)]) == 2
    assert "is not a polyrl config (not a mapping)" in capsys.readouterr().err


def test_a_section_whose_every_panel_is_off_says_why_instead_of_nothing_logged(tmp_path):
    run_dir = tmp_path / "off"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"tasks": [{"name": "a"}], "rl": {"steps": 2}}))
    lines = [{"stage": "rl", "step": s, "reward/a": 0.5, "clip_fraction_low": 0.0, "approx_kl": 0.0} for s in (1, 2)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = build_report(run_dir)[0].read_text()
    diagnostics = text.split("<h2>Objective diagnostics</h2>")[1].split("<h2>")[0]
    assert diagnostics == (
        '<p class="note">Not drawn — clip fraction by side: 0 at every step; approx. KL(old ‖ new), k3: 0 at every '
        "step.</p>"
    )
