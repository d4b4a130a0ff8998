"""`polyrl synth qa`: documents → filtered question/answer pairs → a dataset file, against a scripted endpoint."""

import json

import pytest
from fake_openai import HANG

from polyrl.cli import run as cli
from polyrl.synth.documents import chunk_document, read_documents
from polyrl.synth.qa import QAConfig, check_pair, parse_pairs

ZORBIA = "Zorbia is a small country. Its capital is Quellton.\n\nZorbia has 412 lakes."
BRANNOCK = "The Brannock device measures feet. It was invented by Charles Brannock in 1925."

PAIRS = {
    "Zorbia": [
        {"question": "What is the capital of Zorbia?", "answer": "Quellton"},
        {"question": "How many lakes does Zorbia have?", "answer": 412},
        {"question": "what is the capital of  Zorbia?", "answer": "Quellton"},  # duplicate
        {"question": "Which river flows through Quellton?", "answer": "the Danube"},  # not in the text
        {"question": "Which country is Zorbia?", "answer": "Zorbia"},  # answer in question
        {"question": "Describe it.", "answer": "Zorbia is a small country. Its capital is Quellton"},  # 9 words
        {"question": "No answer here"},  # malformed
    ],
    "Brannock": [
        {"question": "Who invented the foot-measuring device?", "answer": "Charles Brannock"},
        {"question": "In which year was the foot-measuring device invented?", "answer": "1925"},
    ],
}


def writer(prompt: str):
    if prompt.startswith("Answer the question"):
        return "Quellton" if "capital" in prompt else "I do not know"
    key = "Zorbia" if "Zorbia" in prompt else "Brannock"
    return "Here you go:\n```json\n" + json.dumps(PAIRS[key]) + "\n```"


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(ZORBIA)
    (folder / "sub" / "b.md").write_text(BRANNOCK)
    (folder / "empty.txt").write_text("  \n")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    return folder


def synth(endpoint, docs, out, *extra):
    argv = ["synth", "qa", "--docs", str(docs), "--endpoint", endpoint.url, "--model", "fake", "--out", str(out)]
    return cli([*argv, "--retries", "0", "--timeout", "1", *extra])


def test_end_to_end_keeps_grounded_pairs_with_provenance(fake_openai, docs, tmp_path):
    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["question"], r["answer"]) for r in rows] == [
        ("What is the capital of Zorbia?", "Quellton"),
        ("How many lakes does Zorbia have?", "412"),
        ("Who invented the foot-measuring device?", "Charles Brannock"),
        ("In which year was the foot-measuring device invented?", "1925"),
    ]
    first = rows[0]
    assert (first["source_doc"], first["source_chunk"], first["generator"]) == ("a.txt", 0, "fake")
    assert ZORBIA[first["source_start"] : first["source_end"]] == ZORBIA
    assert rows[2]["source_doc"] == "sub/b.md"


def test_the_report_counts_every_skipped_file_and_rejected_pair(fake_openai, docs, tmp_path):
    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out) == 0
    report = json.loads((tmp_path / "qa.jsonl.report.json").read_text())
    assert report["documents"] == 2
    assert report["skipped_files"] == {"empty": 1, "binary": 1, "not_utf8": 1}
    assert report["proposed_pairs"] == 9
    assert report["rejected_pairs"] == {
        "duplicate": 1,
        "not_grounded": 1,
        "answer_in_question": 1,
        "answer_too_long": 1,
        "malformed": 1,
    }
    assert report["kept_pairs"] == 4


def test_the_dataset_file_loads_as_question_and_answer_columns(fake_openai, docs, tmp_path):
    import datasets

    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out) == 0
    table = datasets.load_dataset("json", data_files=str(out), split="train")
    assert {"question", "answer", "source_doc"} <= set(table.column_names)
    assert table[1]["answer"] == "412"


def test_the_dataset_task_loader_reads_the_file(fake_openai, docs, tmp_path):
    from polyrl.tasks.dataset_rows import DatasetSpec, load_rows

    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out) == 0
    rows = load_rows(str(out), DatasetSpec(path=str(out), verifier="normalized"), "train")
    assert [r.target for r in rows] == ["Quellton", "412", "Charles Brannock", "1925"]


def test_solve_check_drops_pairs_the_second_call_gets_wrong(fake_openai, docs, tmp_path):
    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out, "--solve-check") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["answer"] for r in rows] == ["Quellton"]
    assert rows[0]["solve_checked"] is True
    assert json.loads((tmp_path / "qa.jsonl.report.json").read_text())["rejected_pairs"]["unsolved"] == 3


def test_questions_from_an_eval_set_are_rejected_as_leaks(fake_openai, docs, tmp_path):
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"question": "In which year was the foot-measuring device invented? Answer briefly."}))
    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out, "--leak-check", str(evals)) == 0
    answers = [json.loads(line)["answer"] for line in out.read_text().splitlines()]
    assert "1925" not in answers and len(answers) == 3


def test_an_endpoint_that_times_out_is_counted_and_nothing_is_written(fake_openai, docs, tmp_path, capsys):
    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(lambda prompt: HANG), docs, out, "--timeout", "0.3") == 2
    err = capsys.readouterr().err
    assert "no question-answer pair survived" in err and '"endpoint_error": 2' in err
    assert not out.exists()


def test_an_endpoint_returning_junk_is_counted_not_a_crash(fake_openai, docs, tmp_path, capsys):
    def junk(prompt):
        return (200, b"<html>not json</html>") if "Zorbia" in prompt else "Sure! Here are some questions."

    assert synth(fake_openai(junk), docs, tmp_path / "qa.jsonl") == 2
    err = capsys.readouterr().err
    assert '"endpoint_error": 1' in err and '"no_json": 1' in err


def test_a_document_folder_that_does_not_exist_is_a_user_error(fake_openai, tmp_path, capsys):
    assert synth(fake_openai(writer), tmp_path / "nope", tmp_path / "qa.jsonl") == 2
    assert "not a directory" in capsys.readouterr().err


def test_parse_pairs_reads_a_fenced_list_or_one_object_per_line():
    assert parse_pairs('```json\n[{"question": "q", "answer": "a"}]\n```') == [{"question": "q", "answer": "a"}]
    assert parse_pairs('{"question": "q", "answer": "a"},\n{"question": "r", "answer": "b"}') == [
        {"question": "q", "answer": "a"},
        {"question": "r", "answer": "b"},
    ]
    assert parse_pairs("no json at all") is None
    assert parse_pairs("[1, 2") is None


def test_check_pair_compares_answers_after_normalization():
    chunk = chunk_document("d", "The bridge opened in “May 1931”.", 100)[0]
    pair, reason = check_pair({"question": "When did it open?", "answer": "may  1931."}, chunk, QAConfig())
    assert pair == ("When did it open?", "may  1931.") and reason is None


def test_chunks_cut_at_paragraph_breaks_and_cover_the_document():
    text = "one two three.\n\nfour five six.\n\nseven"
    chunks = chunk_document("d", text, 20)
    assert [c.text for c in chunks] == ["one two three.", "\n\nfour five six.", "\n\nseven"]
    assert "".join(c.text for c in chunks) == text
    assert all(text[c.start : c.end] == c.text for c in chunks)


def test_hidden_files_are_not_read(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("secret")
    (tmp_path / "doc.txt").write_text("text")
    docs, skipped = read_documents(tmp_path)
    assert list(docs) == ["doc.txt"] and not skipped


def test_a_folder_of_binary_files_is_reported_not_an_empty_dataset(fake_openai, tmp_path, capsys):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"\x89PNG\x00\x00")
    assert synth(fake_openai(writer), folder, tmp_path / "qa.jsonl") == 2
    err = capsys.readouterr().err
    assert '"skipped_files": {"binary": 1}' in err and '"documents": 0' in err


def test_a_missing_leak_check_file_is_a_user_error(fake_openai, docs, tmp_path, capsys):
    assert synth(fake_openai(writer), docs, tmp_path / "qa.jsonl", "--leak-check", str(tmp_path / "no.jsonl")) == 2
    assert "no such file" in capsys.readouterr().err


def test_problems_of_the_written_dataset_are_tagged_dataset(fake_openai, docs, tmp_path):
    from polyrl.tasks import get_task
    from polyrl.tasks.dataset import load_dataset_task
    from polyrl.tasks.task_registry import TASKS

    out = tmp_path / "qa.jsonl"
    assert synth(fake_openai(writer), docs, out) == 0
    load_dataset_task("synth_qa_demo", {"path": str(out), "verifier": "normalized", "eval_fraction": 0.5})
    try:
        problem = get_task("synth_qa_demo").generate(0, split="train")
        assert problem.source == "dataset"
        assert problem.answer in {"Quellton", "412", "Charles Brannock", "1925"}
    finally:
        TASKS.remove("synth_qa_demo")
