"""The report's "Samples" section: completions the policy wrote during RL, with their rewards, per logged step.

RL records may carry ``samples``: a list of ``{"task", "prompt", "completion", "reward", "correct", "reason"}``, and
``images`` (base64 PNG text) where the problem showed images: they are shown above the prompt as inline PNG data URIs,
and ``observation_images`` (``{"turn", "images"}``) where an episode's observations showed pictures: they are shown
below the completion, each group headed by the policy turn it followed; each image is decoded and encoded again first (an entry that is not an image within :data:`MAX_SHOWN_PIXELS` is named, not
shown), so nothing but PNG bytes polyrl wrote reaches the page.
Completions are model output, and a policy optimised for reward is adversarial: every field is treated as hostile
text. It is converted to a string, stripped of control characters and unpaired surrogates (which would make the page
unwritable as UTF-8), cut to ``MAX_CHARS`` and HTML-escaped (``<``, ``>``, ``&``, both quotes), so no field can open
a tag, close the table or inject a script. Malformed entries (not a list, not a dict, missing fields) are skipped or
shown as "–" rather than failing the report.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from polyrl.errors import UserError
from polyrl.tasks.images import data_uri, image_from_record

MAX_CHARS = 2000
"""Longest prompt or completion shown (the trainer already cuts them to a few hundred characters)."""
MAX_STEPS = 12
"""Most steps shown: the first, the last, and evenly spaced ones between."""
MAX_ROWS = 32
"""Most completions shown per step (the first ones logged)."""

MAX_SHOWN_PIXELS = 1024 * 1024
"""Largest image shown in the samples (problems' images are small; a larger entry is named, not shown)."""
SHOWN_WIDTH = 160
"""Most pixels an image is drawn wide on the page (small pictures are enlarged, pixels kept square)."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def safe_text(x: Any, limit: int = MAX_CHARS) -> str:
    """``x`` as HTML-escaped text: any type, control characters and unpaired surrogates replaced, cut at ``limit``."""
    text = "" if x is None else x if isinstance(x, str) else str(x)
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL.sub("\ufffd", text)
    if len(text) > limit:
        text = text[:limit] + f" … ({len(text) - limit} more characters)"
    return html.escape(text, quote=True)


def sampled_steps(rl: list[dict[str, Any]], key: str = "samples") -> dict[int, list[dict[str, Any]]]:
    """Step -> the dict entries of its non-empty ``key`` list (``samples``, or self-play's ``selfplay/examples``),
    in step order; a re-logged step keeps the last record's."""
    out: dict[int, list[dict[str, Any]]] = {}
    for record in rl:
        step, entries = record.get("step"), record.get(key)
        if isinstance(step, int) and isinstance(entries, list):
            kept = [e for e in entries if isinstance(e, dict)]
            if kept:
                out[step] = kept
    return dict(sorted(out.items()))


def steps_to_show(steps: list[int], most: int = MAX_STEPS) -> list[int]:
    """At most ``most`` of ``steps``: the first, the last and evenly spaced ones between, in order."""
    if len(steps) <= most:
        return list(steps)
    picks = {round(i * (len(steps) - 1) / (most - 1)) for i in range(most)}
    return [steps[i] for i in sorted(picks)]


def _reward(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _correct_cell(x: Any) -> str:
    if x is True or x == 1:
        return '<td class="up">✓</td>'
    if x is False or x == 0:
        return '<td class="down">✗</td>'
    return "<td>–</td>"


def images_html(images: Any, kind: str = "problem") -> str:
    """``<img>`` elements for a sample's images (re-encoded PNG data URIs), "" for none; a bad entry is a note.
    ``kind`` names them in each image's ``alt`` and class (``problem``, ``observation``)."""
    if not isinstance(images, list) or not images:
        return ""
    shown = []
    for i, value in enumerate(images[:MAX_ROWS]):
        try:
            if not isinstance(value, str):
                raise UserError(f"image {i}: not base64 PNG text")
            image = image_from_record(value, f"image {i}", MAX_SHOWN_PIXELS)
        except UserError as exc:
            shown.append(f'<span class="note">{safe_text(exc, 200)}</span>')
            continue
        width = min(SHOWN_WIDTH, image.width * max(1, SHOWN_WIDTH // image.width))  # whole-pixel enlargement
        shown.append(f'<img class="{kind}" alt="{kind} image {i}" width="{width}" src="{data_uri(image)}">')
    return f'<div class="images">{"".join(shown)}</div>'


def observation_images_html(entries: Any) -> str:
    """The pictures an episode's observations showed (``observation_images``: ``{"turn", "images"}`` entries in turn
    order), each group headed by the policy turn it followed; "" for none; a malformed entry is skipped."""
    if not isinstance(entries, list):
        return ""
    shown = []
    for entry in entries[:MAX_ROWS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("turn"), int) or isinstance(entry["turn"], bool):
            continue
        pictures = images_html(entry.get("images"), "observation")
        if pictures:
            shown.append(f'<div class="note">observation after turn {entry["turn"]}:</div>{pictures}')
    return "".join(shown)


def _row(sample: dict[str, Any]) -> str:
    reward = _reward(sample.get("reward"))
    return (
        f"<tr><td>{safe_text(sample.get('task'), 200)}</td>"
        f"<td>{'–' if reward is None else f'{reward:.3g}'}</td>"
        f"{_correct_cell(sample.get('correct'))}"
        f"<td>{safe_text(sample.get('reason'), 200)}</td>"
        f'<td class="text">{images_html(sample.get("images"))}<div>{safe_text(sample.get("prompt"))}</div></td>'
        f'<td class="text"><div>{safe_text(sample.get("completion"))}</div>'
        f"{observation_images_html(sample.get('observation_images'))}</td></tr>"
    )


def _summary(step: int, samples: list[dict[str, Any]]) -> str:
    rewards = [r for r in (_reward(s.get("reward")) for s in samples) if r is not None]
    parts = [f"step {step}", f"{len(samples)} completion{'s' if len(samples) != 1 else ''}"]
    if len(samples) > MAX_ROWS:
        parts[-1] += f" (first {MAX_ROWS} shown)"
    if rewards:
        parts.append(f"mean reward {sum(rewards) / len(rewards):.3g}")
    verdicts = [s.get("correct") for s in samples if isinstance(s.get("correct"), bool)]
    if verdicts:
        parts.append(f"{sum(verdicts)}/{len(verdicts)} correct")
    return " · ".join(parts)


def samples_section(rl: list[dict[str, Any]]) -> str:
    """The section's HTML: one collapsible table per shown step (the last one open); "" when nothing was sampled."""
    by_step = sampled_steps(rl)
    if not by_step:
        return ""
    shown = steps_to_show(list(by_step))
    head = "<tr><th>task</th><th>reward</th><th>correct</th><th>reason</th><th>prompt</th><th>completion</th></tr>"
    blocks = [
        f'<p class="note">Completions were sampled at {len(by_step)} step{"s" if len(by_step) != 1 else ""}; '
        f"shown: step{'s' if len(shown) != 1 else ''} {', '.join(map(str, shown))} (click a step to open it).</p>"
    ]
    for step in shown:
        samples = by_step[step]
        blocks.append(
            f'<details class="samples" id="samples-step-{step}"{" open" if step == shown[-1] else ""}>'
            f"<summary>{_summary(step, samples)}</summary>"
            f'<table class="samples">{head}{"".join(_row(s) for s in samples[:MAX_ROWS])}</table></details>'
        )
    return "".join(blocks)


def proposals_section(rl: list[dict[str, Any]]) -> str:
    """Self-play's logged proposals (``selfplay/examples``) at up to :data:`MAX_STEPS` steps, one table row each:
    the proposal, valid or the reason it is not, the solver group's success rate and the proposer's reward. Every
    field is hostile text (see the module docstring); "" when nothing was logged."""
    by_step = sampled_steps(rl, "selfplay/examples")
    if not by_step:
        return ""
    shown = steps_to_show(sorted(by_step))
    head = "<tr><th>step</th><th>reward</th><th>valid</th><th>reason</th><th>solver success</th><th>proposal</th></tr>"
    rows = []
    for step in shown:
        for e in by_step[step][:MAX_ROWS]:
            reward, rate = _reward(e.get("reward")), _reward(e.get("solver_success"))
            rows.append(
                f"<tr><td>{step}</td><td>{'–' if reward is None else f'{reward:.3g}'}</td>"
                f"{_correct_cell(e.get('valid'))}<td>{safe_text(e.get('reason'), 200)}</td>"
                f"<td>{'–' if rate is None else f'{100 * rate:.0f}%'}</td>"
                f'<td class="text"><div>{safe_text(e.get("proposal"), 400)}</div></td></tr>'
            )
    return (
        f'<p class="note">Proposals logged at steps {", ".join(map(str, shown))}: the first of each proposer prompt '
        "in turn.</p>"
        f'<details class="samples" id="proposals" open><summary>proposals</summary>'
        f'<table class="samples">{head}{"".join(rows)}</table></details>'
    )
