"""The report's parts on hand-made records: series reading, panel choice, smoothing, legends, the samples section."""

import math

import pytest

from polyrl.report import panels, plots, series
from polyrl.report.samples import safe_text, samples_section, steps_to_show

TASKS = ["countdown", "rg/basic_arithmetic"]


# -- series ----------------------------------------------------------------------------------------------------------
def test_a_series_keeps_only_the_steps_with_a_finite_number():
    records = [
        {"step": 1, "kl": 0.5},
        {"step": 2, "kl": None},  # a NaN as RunDir.log writes it
        {"step": 3, "kl": math.nan},
        {"step": 4, "kl": math.inf},
        {"step": 5, "kl": "0.1"},
        {"step": 6, "kl": True},
        {"step": 7},
        {"step": 8, "kl": 2},
    ]
    assert series.series(records, "kl") == ([1, 8], [0.5, 2.0])


def test_reward_terms_are_told_from_their_per_task_form_even_when_a_task_name_has_a_slash():
    records = [
        {
            "step": 1,
            "reward_terms/verifier": 0.5,
            "reward_terms/format": 0.1,
            "reward_terms/verifier/rg/basic_arithmetic": 0.4,
            "reward_terms/format/countdown": 0.2,
        }
    ]
    assert series.terms(records, "reward_terms", TASKS) == ["format", "verifier"]


def test_tasks_are_the_configs_then_any_other_with_per_task_reward_keys():
    records = [{"step": 1, "reward/b": 1, "reward/rg/a": 0, "reward/z": 1, "reward": 0.5}]
    assert series.task_names(["z"], records) == ["z", "b", "rg/a"]
    assert series.task_names([], records) == ["b", "rg/a", "z"]


# -- which panels ----------------------------------------------------------------------------------------------------
def _titles(chosen):
    return [p.title for p in chosen]


def test_the_kl_panel_is_left_out_when_kl_coef_is_zero_even_if_a_kl_was_logged():
    rl = [{"step": s, "kl": 0.01 * s, "kl/countdown": 0.01 * s} for s in (1, 2)]
    shown, omitted = panels.select(panels.PER_TASK, rl, TASKS, {"rl": {"kl_coef": 0.0}})
    assert "KL to reference" not in _titles(shown)
    assert omitted == [series.Omitted("KL to reference", "off (rl.kl_coef = 0)")]


def test_the_kl_panel_is_drawn_when_kl_coef_is_positive():
    rl = [{"step": s, "kl": 0.01 * s} for s in (1, 2)]
    shown, omitted = panels.select(panels.PER_TASK, rl, TASKS, {"rl": {"kl_coef": 0.05}})
    assert _titles(shown) == ["KL to reference"] and omitted == []


def test_a_diagnostic_that_is_zero_at_every_step_is_listed_as_not_drawn():
    rl = [{"step": s, "clip_fraction": 0.0, "clip_fraction_low": 0.0, "clip_fraction_high": None} for s in (1, 2)]
    shown, omitted = panels.select(panels.DIAGNOSTICS, rl, TASKS, {})
    assert shown == [] and omitted == [series.Omitted("clip fraction by side", "0 at every step")]


def test_a_panel_whose_keys_were_never_logged_is_neither_drawn_nor_listed():
    rl = [{"step": 1, "grad_norm": 1.5, "tis_weight_mean": None}, {"step": 2, "grad_norm": math.nan}]
    shown, omitted = panels.select(panels.DIAGNOSTICS, rl, TASKS, {})
    assert _titles(shown) == ["gradient norm"] and omitted == []


def test_a_per_task_panel_is_drawn_when_only_its_per_task_keys_were_logged():
    rl = [{"step": 1, "entropy/countdown": 0.7}]
    shown, _ = panels.select(panels.PER_TASK, rl, TASKS, {})
    assert _titles(shown) == ["entropy (nats / token)"]


def test_reward_terms_panel_has_one_curve_per_term_and_failures_only_when_logged():
    rl = [{"step": 1, "reward_terms/verifier": 1.0, "reward_terms/length": -0.1, "reward_terms/verifier/countdown": 1}]
    (terms,) = panels.term_panels(rl, TASKS)
    assert terms.title == "reward terms" and [c.label for c in terms.curves] == ["length", "verifier"]


# -- smoothing -------------------------------------------------------------------------------------------------------
def test_smoothing_is_a_bias_corrected_ema():
    # step 1: 0.5 * 1 / (1 - 0.5) = 1; step 2: (0.5 * 0.5 + 0.5 * 0) / (1 - 0.25) = 1/3
    assert plots.smooth([1.0, 0.0], 0.5) == pytest.approx([1.0, 1 / 3])


def test_the_smoothing_span_grows_with_the_number_of_steps():
    assert plots.ema_alpha(29) == 0.0  # span 1: no smoothing
    assert plots.ema_alpha(30) == pytest.approx(1 / 3)  # span 2
    assert plots.ema_alpha(150) == pytest.approx(9 / 11)  # span 10


def test_a_long_noisy_curve_is_drawn_smoothed_over_its_faint_raw_values():
    rl = [{"step": s, "reward/countdown": float(s % 2)} for s in range(1, 61)]
    fig = plots.per_task_curves(rl, ["countdown"], [panels.PER_TASK[0]])
    raw, smoothed = fig.axes[0].get_lines()
    assert list(raw.get_ydata()) == [float(s % 2) for s in range(1, 61)] and raw.get_alpha() < 0.5
    assert max(smoothed.get_ydata()[10:]) - min(smoothed.get_ydata()[10:]) < 0.5  # the 0/1 zigzag is flattened


# -- legends ---------------------------------------------------------------------------------------------------------
LONG = ["topological_sort", "graph_coloring", "rg/propositional_logic", "subset_sum", "maze_path", "rg/countdown"]


def _inside(fig, legend) -> bool:
    fig.canvas.draw()
    box = legend.get_window_extent(fig.canvas.get_renderer())
    return box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def test_the_curriculum_legend_fits_in_the_figure_with_one_panel_and_long_task_names():
    rl = [{"step": s, **{f"sampler_weight/{t}": 1 / len(LONG) for t in LONG}} for s in (1, 2, 3)]
    fig = plots.curriculum(rl, LONG)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == LONG  # the first and last task too
    assert _inside(fig, legend)


def test_the_training_legend_fits_with_many_tasks():
    tasks = [f"{name}_{i}" for i in range(3) for name in LONG]
    rl = [{"step": s, **{f"reward/{t}": 0.5 for t in tasks}, "reward": 0.5} for s in (1, 2)]
    fig = plots.per_task_curves(rl, tasks, [panels.PER_TASK[0]])
    (legend,) = fig.legends
    assert len(legend.get_texts()) == len(tasks) + 1 and _inside(fig, legend)


def test_a_task_keeps_its_colour_in_a_panel_where_another_task_is_missing():
    rl = [{"step": 1, "reward/a": 0.1, "reward/b": 0.2, "accuracy/b": 0.3}]
    fig = plots.per_task_curves(rl, ["a", "b"], [panels.PER_TASK[0], panels.PER_TASK[1]])
    reward_b = fig.axes[0].get_lines()[1].get_color()
    accuracy_b = fig.axes[1].get_lines()[0].get_color()
    assert reward_b == accuracy_b == plots.task_colors(["a", "b"])["b"]


# -- samples ---------------------------------------------------------------------------------------------------------
def test_sample_text_is_html_escaped():
    assert safe_text("</textarea><script>alert('x')</script>&") == (
        "&lt;/textarea&gt;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;"
    )


def test_sample_text_loses_control_characters_and_unpaired_surrogates_and_is_cut():
    assert safe_text("a\x00b\ud800c\n\td") == "a\ufffdb?c\n\td"
    assert safe_text("x" * 12, limit=10) == "x" * 10 + " … (2 more characters)"
    assert safe_text(None) == "" and safe_text(3.5) == "3.5"


def test_steps_to_show_keeps_the_first_and_last_and_spreads_the_rest():
    assert steps_to_show(list(range(1, 31)), most=4) == [1, 11, 20, 30]
    assert steps_to_show([5, 10], most=4) == [5, 10]


HOSTILE = '</textarea></td></tr></table><script>alert(1)</script><img src=x onerror="alert(2)">'


def test_a_hostile_completion_cannot_open_a_tag_in_the_samples_section():
    rl = [
        {
            "step": 3,
            "samples": [
                {"task": "<b>t</b>", "prompt": "p", "completion": HOSTILE, "reward": 1.0, "correct": True},
                {"task": "countdown", "completion": "ok", "reward": None, "correct": None, "reason": "<i>"},
            ],
        }
    ]
    section = samples_section(rl)
    assert "<script" not in section and "<img" not in section and "</textarea" not in section
    assert "<b>" not in section and "<i>" not in section
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert section.count("<tr>") == 3  # header + two samples: the completion did not end the table


def test_malformed_samples_are_skipped():
    rl = [
        {"step": 1, "samples": "not a list"},
        {"step": 2, "samples": [1, None, "x"]},
        {"step": 3, "samples": [{"completion": "kept"}, 7]},
    ]
    section = samples_section(rl)
    assert 'id="samples-step-3"' in section and "samples-step-1" not in section and "samples-step-2" not in section
    assert "kept" in section and "shown: step 3 " in section


def test_the_samples_summary_gives_mean_reward_and_correct_count():
    rl = [{"step": 7, "samples": [{"reward": 1.0, "correct": True}, {"reward": 0.0, "correct": False}]}]
    assert "step 7 · 2 completions · mean reward 0.5 · 1/2 correct" in samples_section(rl)


def test_no_samples_no_section():
    assert samples_section([{"step": 1, "reward": 0.5}]) == ""


def test_a_step_with_many_samples_shows_the_first_max_rows():
    rl = [{"step": 1, "samples": [{"completion": f"c{i}", "reward": 0.0} for i in range(40)]}]
    section = samples_section(rl)
    assert "40 completions (first 32 shown)" in section
    assert section.count("<tr>") == 1 + 32 and "c31" in section and "c32" not in section
