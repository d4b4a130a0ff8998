"""Fixtures for the reward tests (the fake judge endpoint is the shared tests/fake_openai.py)."""

import pytest


@pytest.fixture(scope="session")
def rubric(tmp_path_factory):
    path = tmp_path_factory.mktemp("rubrics") / "r.md"
    path.write_text("# Rubric\nCorrect answers score high.\n")
    return str(path)
