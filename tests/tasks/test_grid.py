"""Grid tasks: reference solutions, alternative valid answers, wrong and malformed answers, difficulty."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem


def score(name, problem, answer):
    v = get_task(name).verify(problem, f"<answer>{answer}</answer>")
    return v.score, v.reason


def problem(name, answer, question="hand-written"):
    return Problem.from_dict({"task": name, "question": question, "answer": answer})


# -- sudoku -----------------------------------------------------------------------------------------
SUDOKU = {"puzzle": ["..34", "3412", "..43", "4321"], "box": [2, 2]}


def test_sudoku_accepts_either_completion_and_row_syntaxes():
    p = problem("sudoku", SUDOKU)
    assert score("sudoku", p, "1234/3412/2143/4321") == (1.0, "correct")
    assert score("sudoku", p, "2134\n3412\n1243\n4321") == (1.0, "correct")
    assert score("sudoku", p, "2 1 3 4 3 4 1 2 1 2 4 3 4 3 2 1") == (1.0, "correct")


def test_sudoku_rejects_changed_givens_and_broken_rules():
    p = problem("sudoku", SUDOKU)
    assert score("sudoku", p, "1243/3412/2134/4321") == (0.0, "wrong")  # changes the given 3 4
    assert score("sudoku", p, "1234/3412/1243/4321") == (0.0, "wrong")  # column 1 repeats
    assert score("sudoku", p, "1234/3412/2143") == (0.0, "malformed")
    assert score("sudoku", p, "1234/3412/2143/4329") == (0.0, "malformed")


def test_sudoku_generated_grid_is_valid_at_every_size():
    from polyrl.tasks.builtin.grid_puzzles import _sudoku_valid

    t = get_task("sudoku")
    for size, box in [(4, [2, 2]), (6, [2, 3]), (9, [3, 3])]:
        p = t.generate(0, {"size": size})
        assert p.answer["box"] == box and _sudoku_valid(p.solution.split("/"), *box)


# -- n-queens -----------------------------------------------------------------------------------------
def test_queens_accepts_both_four_queen_solutions():
    p = problem("n_queens", {"given": [0, 0, 0, 0]})
    assert score("n_queens", p, "2 4 1 3") == (1.0, "correct")
    assert score("n_queens", p, "[3, 1, 4, 2]") == (1.0, "correct")


def test_queens_rejects_attacks_ignored_givens_and_bad_columns():
    assert score("n_queens", problem("n_queens", {"given": [0, 0, 0, 0]}), "1 3 2 4") == (0.0, "wrong")
    assert score("n_queens", problem("n_queens", {"given": [3, 0, 0, 0]}), "2 4 1 3") == (0.0, "wrong")
    assert score("n_queens", problem("n_queens", {"given": [0, 0, 0, 0]}), "2 4 1 5") == (0.0, "malformed")
    assert score("n_queens", problem("n_queens", {"given": [0, 0, 0, 0]}), "2 4 1") == (0.0, "malformed")


# -- maze -------------------------------------------------------------------------------------------
MAZE = {"maze": ["S..", "...", "..E"], "steps": 4}


def test_maze_accepts_any_shortest_path():
    p = problem("maze_path", MAZE)
    for moves in ["RRDD", "DDRR", "R D R D", "d,r,d,r"]:
        assert score("maze_path", p, moves) == (1.0, "correct")


def test_maze_gives_partial_credit_for_a_detour():
    assert score("maze_path", problem("maze_path", MAZE), "RRLRDD") == (pytest.approx(0.5 * 4 / 6), "partial")


def test_maze_rejects_walls_leaving_the_grid_and_stopping_short():
    walled = problem("maze_path", {"maze": ["S#.", "...", "..E"], "steps": 4})
    assert score("maze_path", walled, "RRDD") == (0.0, "wrong")
    assert score("maze_path", problem("maze_path", MAZE), "URRDDD") == (0.0, "wrong")
    assert score("maze_path", problem("maze_path", MAZE), "RRD") == (0.0, "wrong")
    assert score("maze_path", problem("maze_path", MAZE), "RRXD") == (0.0, "malformed")


# -- islands and transforms ---------------------------------------------------------------------------
def test_islands_counts_four_connected_groups():
    t = get_task("count_islands")
    from polyrl.tasks.builtin.grid import _count_islands

    assert _count_islands(["#.#", ".#.", "#.#"]) == 5  # diagonal neighbours are separate islands
    assert _count_islands(["##.", ".#.", ".##"]) == 1
    p = problem("count_islands", 5)
    assert score("count_islands", p, "5") == (1.0, "correct")
    assert score("count_islands", p, "4") == (0.0, "wrong")
    assert score("count_islands", p, "five") == (0.0, "malformed")
    assert t.generate(0, "hard").answer == _count_islands(t.generate(0, "hard").question.split()[1].split("/"))


def test_grid_transform_rotates_clockwise_and_composes_left_to_right():
    from polyrl.tasks.builtin.grid import _transform

    assert _transform(["ab", "cd"], "rot90") == ["ca", "db"]
    assert _transform(["abc", "def"], "rot270") == ["cf", "be", "ad"]
    assert _transform(_transform(["abc", "def"], "fliph"), "flipv") == _transform(["abc", "def"], "rot180")


def test_grid_transform_partial_credit_for_right_shape_only():
    p = problem("grid_transform", ["ca", "db"])
    assert score("grid_transform", p, "ca/db") == (1.0, "correct")
    assert score("grid_transform", p, "ca\ndb") == (1.0, "correct")
    assert score("grid_transform", p, "ca/bd") == (0.25, "partial")
    assert score("grid_transform", p, "cad/b") == (0.0, "malformed")
