"""`polyrl report`: one self-contained HTML page from a real (seconds-long) run, finished, unfinished or SFT only."""

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
    }
    assert len(pngs) == len(names)
    assert "finished" in page and "after RL" in page and "Resolved config" in page
    assert "<script" not in page and "http" not in page.split("<pre>")[0]  # self-contained: nothing to fetch
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


def test_report_of_a_run_without_rl(tiny_train_config, tmp_path):
    cfg = tiny_train_config(rl__enabled=False)
    Trainer(cfg).run()
    page, pngs = build_report(cfg.run_dir)
    text = page.read_text()
    assert "finished · SFT only" in text and "Nothing logged yet" in text
    assert {p.name for p in pngs} == {"report_heldout.png", "report_sft.png"}


def test_report_of_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path, capsys):
    assert run(["report", str(tmp_path)]) == 2
    assert "not a polyrl run directory" in capsys.readouterr().err


def test_report_renders_in_headless_chromium(finished_run, tmp_path):
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "/usr/bin/chromium"))), None)
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
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
