"""Every multi-answer verifier agrees with an independent brute-force checker on random candidate answers.

Candidates are drawn as structures (a run list, an expression tree, an assignment, a permutation), mostly
as near misses of the reference answer, then written out as text. The oracle below judges the structure
with its own few lines of code (never the task's checker); the task judges the text. They must agree on
every candidate: no false positives, no false negatives.
"""

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyrl import get_task

ORACLE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 10_000)
LEVELS = st.sampled_from(["easy", "medium", "hard"])


def _correct(name, problem, answer_text):
    return get_task(name).verify(problem, f"<answer>{answer_text}</answer>").correct


# -- run-length encoding -------------------------------------------------------------------------------------
def _runs(text):
    runs = []
    for ch in text:
        if runs and runs[-1][1] == ch:
            runs[-1][0] += 1
        else:
            runs.append([1, ch])
    return runs


def _take_digits(text, i):
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    return text[i:j], j


def _rle_oracle(text, target):
    """Correct iff ``text``, read wholly count-first or wholly letter-first (a missing count is 1, a count has
    no leading zero), gives exactly the target's maximal runs."""
    for count_first in (True, False):
        runs, i, ok = [], 0, True
        while ok and i < len(text):
            if count_first:
                digits, i = _take_digits(text, i)
                ok = i < len(text) and text[i].isalpha()
                ch, i = text[i : i + 1], i + 1
            else:
                ch, i = text[i], i + 1
                ok = ch.isalpha()
                digits, i = _take_digits(text, i)
            ok = ok and not digits.startswith("0")
            runs.append([int(digits) if digits else 1, ch])
        if ok and runs == _runs(target):
            return True
    return False


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_run_length_encoding_matches_oracle(seed, level, data):
    problem = get_task("run_length_encoding").generate(seed, level)
    pieces = []
    for n, ch in _runs(problem.answer):
        n = data.draw(st.sampled_from([n, n, n, 0, n + 1, max(1, n - 1)]))
        written = data.draw(st.sampled_from([str(n), str(n), "", "0" + str(n)]))
        if written == "" and n != 1:
            n = 1  # an omitted count means 1
        ch = data.draw(st.sampled_from([ch] * 5 + ["a", "e"]))
        pieces.append((data.draw(st.sampled_from(["count", "count", "letter"])), n, ch, written))
    if data.draw(st.booleans()) and len(pieces) > 1:
        pieces.pop(data.draw(st.integers(0, len(pieces) - 1)))
    text = "".join(w + c if style == "count" else c + w for style, _, c, w in pieces)
    assert _correct("run_length_encoding", problem, text) == _rle_oracle(text, problem.answer), text


# -- knights and knaves --------------------------------------------------------------------------------------
@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_knights_knaves_matches_oracle(seed, level, data):
    problem = get_task("knights_knaves").generate(seed, level)
    people, roles = problem.answer["people"], problem.answer["roles"]
    pairs = [(p, data.draw(st.sampled_from([r, r, r, "knight", "knave"]))) for p, r in zip(people, roles)]
    extra = data.draw(st.sampled_from([None, None, "dup_other_case", "drop", "stranger"]))
    if extra == "dup_other_case":
        p = data.draw(st.sampled_from(people))
        pairs.insert(
            data.draw(st.integers(0, len(pairs))), (p.lower(), data.draw(st.sampled_from(["knight", "knave"])))
        )
    elif extra == "drop":
        pairs.pop(data.draw(st.integers(0, len(pairs) - 1)))
    elif extra == "stranger":
        pairs.append(("Z", "knight"))
    pairs = [(p.lower() if data.draw(st.booleans()) else p, r) for p, r in pairs]
    text = " ".join(f"{p}={r}" for p, r in pairs)
    names = [p.upper() for p, _ in pairs]
    oracle = sorted(names) == sorted(people) and all(r == roles[people.index(p.upper())] for p, r in pairs)
    assert _correct("knights_knaves", problem, text) == oracle, text


# -- cryptarithm ---------------------------------------------------------------------------------------------
def _cryptarithm_oracle(pairs, addends, total):
    letters = [k.upper() for k, _ in pairs]
    digits = dict((k.upper(), v) for k, v in pairs)
    words = addends + [total]
    if sorted(letters) != sorted({c for w in words for c in w}) or len(set(digits.values())) != len(digits):
        return False
    if any(not 0 <= v <= 9 for v in digits.values()) or any(len(w) > 1 and digits[w[0]] == 0 for w in words):
        return False
    value = [int("".join(str(digits[c]) for c in w)) for w in words]
    return sum(value[:-1]) == value[-1]


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_cryptarithm_matches_oracle(seed, level, data):
    problem = get_task("cryptarithm").generate(seed, level)
    reference = [(k, int(v)) for k, v in (kv.split("=") for kv in problem.solution.split())]
    pairs = [(k, data.draw(st.sampled_from([v, v, v, (v + 1) % 10, 0, 10]))) for k, v in reference]
    if data.draw(st.booleans()):
        k, _ = data.draw(st.sampled_from(pairs))
        pairs.append((k.lower(), data.draw(st.integers(0, 9))))
    pairs = data.draw(st.permutations(pairs))
    text = " ".join(f"{k}={v}" for k, v in pairs)
    oracle = _cryptarithm_oracle(pairs, problem.answer["addends"], problem.answer["total"])
    assert _correct("cryptarithm", problem, text) == oracle, text


# -- countdown and game24 ------------------------------------------------------------------------------------
def _tree(data, numbers):
    """A random full binary expression tree over ``numbers`` (in the given order): (text, value or None, leaves)."""
    if len(numbers) == 1:
        return str(numbers[0]), Fraction(numbers[0])
    cut = data.draw(st.integers(1, len(numbers) - 1))
    (lt, lv), (rt, rv) = _tree(data, numbers[:cut]), _tree(data, numbers[cut:])
    op = data.draw(st.sampled_from("+-*/"))
    if lv is None or rv is None or (op == "/" and rv == 0):
        value = None
    else:
        value = {"+": lv + rv, "-": lv - rv, "*": lv * rv, "/": lv / rv if rv else None}[op]
    return f"({lt}{op}{rt})", value


@pytest.mark.parametrize("name", ["countdown", "game24"])
@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_target_puzzles_match_oracle(name, seed, level, data):
    problem = get_task(name).generate(seed, level)
    numbers, target = problem.answer["numbers"], problem.answer["target"]
    picked = data.draw(st.lists(st.sampled_from(numbers + [1, 7]), min_size=1, max_size=len(numbers) + 1))
    if data.draw(st.booleans()):  # a near miss of the reference: its numbers, other operators and grouping
        picked = data.draw(st.permutations(numbers))
    text, value = _tree(data, picked)
    stated = data.draw(st.sampled_from([None, None, target, target + 1, value]))
    if stated is not None:
        text += f" = {stated}"
    used_ok = not Counter(picked) - Counter(numbers) and (name == "countdown" or Counter(picked) == Counter(numbers))
    oracle = used_ok and value is not None and value == target and (stated is None or stated == value)
    assert _correct(name, problem, text) == oracle, text


# -- subset sum, n-queens, coloring, topological order, Hamiltonian path, sat ---------------------------------
@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_subset_sum_matches_oracle(seed, level, data):
    problem = get_task("subset_sum").generate(seed, level)
    numbers, target = problem.answer["numbers"], problem.answer["target"]
    picked = data.draw(st.lists(st.sampled_from(numbers + [0, -1, target]), max_size=len(numbers)))
    oracle = bool(picked) and not Counter(picked) - Counter(numbers) and sum(picked) == target
    assert _correct("subset_sum", problem, " ".join(map(str, picked)) or "none") == oracle


def _near_permutation(data, items):
    items = list(items)
    for _ in range(data.draw(st.integers(0, 2))):
        i, j = data.draw(st.integers(0, len(items) - 1)), data.draw(st.integers(0, len(items) - 1))
        items[i], items[j] = items[j], items[i]
    if data.draw(st.integers(0, 5)) == 0:
        items[data.draw(st.integers(0, len(items) - 1))] = data.draw(st.integers(-1, len(items) + 1))
    return items


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_n_queens_matches_oracle(seed, level, data):
    problem = get_task("n_queens").generate(seed, level)
    given_cols = problem.answer["given"]
    n = len(given_cols)
    cols = _near_permutation(data, [int(c) for c in problem.solution.split()])
    in_range = all(1 <= c <= n for c in cols)
    attacks = any(cols[a] == cols[b] or abs(cols[a] - cols[b]) == b - a for a in range(n) for b in range(a + 1, n))
    keeps = all(g == 0 or g == c for g, c in zip(given_cols, cols))
    assert _correct("n_queens", problem, " ".join(map(str, cols))) == (in_range and not attacks and keeps)


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_graph_coloring_matches_oracle(seed, level, data):
    problem = get_task("graph_coloring").generate(seed, level)
    k, edges = problem.answer["colors"], problem.answer["edges"]
    colors = [int(c) for c in problem.solution.split()]
    colors = [data.draw(st.sampled_from([c, c, c, 1, k, k + 1, 0])) for c in colors]
    oracle = all(1 <= c <= k for c in colors) and all(colors[a] != colors[b] for a, b in edges)
    assert _correct("graph_coloring", problem, " ".join(map(str, colors))) == oracle


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_topological_sort_matches_oracle(seed, level, data):
    problem = get_task("topological_sort").generate(seed, level)
    n, edges = problem.answer["nodes"], problem.answer["edges"]
    order = _near_permutation(data, [int(c) for c in problem.solution.split()])
    oracle = sorted(order) == list(range(n)) and all(order.index(a) < order.index(b) for a, b in edges)
    assert _correct("topological_sort", problem, " ".join(map(str, order))) == oracle


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_hamiltonian_path_matches_oracle(seed, level, data):
    problem = get_task("hamiltonian_path").generate(seed, level)
    n, edges = problem.answer["nodes"], {tuple(e) for e in problem.answer["edges"]}
    walk = _near_permutation(data, [int(c) for c in problem.solution.split()])
    steps = all((min(a, b), max(a, b)) in edges for a, b in zip(walk, walk[1:]))
    assert _correct("hamiltonian_path", problem, " ".join(map(str, walk))) == (
        sorted(walk) == list(range(n)) and steps
    )


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_sat_matches_oracle(seed, level, data):
    problem = get_task("sat").generate(seed, level)
    n, clauses = problem.answer["variables"], problem.answer["clauses"]
    names = [f"x{i + 1}" for i in range(n)] if n > 26 else [chr(ord("a") + i) for i in range(n)]
    values = [bool(int(kv.split("=")[1])) for kv in problem.solution.split()]
    values = [v != data.draw(st.booleans()) if data.draw(st.integers(0, 3)) == 0 else v for v in values]
    pairs = list(zip(names, values))
    if data.draw(st.integers(0, 4)) == 0:
        pairs.pop(data.draw(st.integers(0, n - 1)))
    given = dict(pairs)
    needed = {names[abs(lit) - 1] for c in clauses for lit in c}
    oracle = needed <= set(given) and all(any(given[names[abs(lit) - 1]] == (lit > 0) for lit in c) for c in clauses)
    assert _correct("sat", problem, " ".join(f"{k}={int(v)}" for k, v in pairs)) == oracle


# -- sudoku, magic square: grids ----------------------------------------------------------------------------
def _mutate_cells(data, rows):
    rows = [list(r) for r in rows]
    n = len(rows)
    for _ in range(data.draw(st.integers(0, 2))):
        r1, c1, r2, c2 = (data.draw(st.integers(0, n - 1)) for _ in range(4))
        rows[r1][c1], rows[r2][c2] = rows[r2][c2], rows[r1][c1]
    if data.draw(st.integers(0, 3)) == 0:
        rows[data.draw(st.integers(0, n - 1))][data.draw(st.integers(0, n - 1))] = data.draw(st.integers(1, n * n))
    return rows


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_sudoku_matches_oracle(seed, level, data):
    problem = get_task("sudoku").generate(seed, level)
    puzzle, (br, bc) = problem.answer["puzzle"], problem.answer["box"]
    n = br * bc
    grid = _mutate_cells(data, [[int(ch) for ch in row] for row in problem.solution.split("/")])
    full = set(range(1, n + 1))
    units = [list(row) for row in grid] + [list(col) for col in zip(*grid)]
    units += [
        [grid[r][c] for r in range(r0, r0 + br) for c in range(c0, c0 + bc)]
        for r0 in range(0, n, br)
        for c0 in range(0, n, bc)
    ]
    keeps = all(g == "." or int(g) == x for grow, row in zip(puzzle, grid) for g, x in zip(grow, row))
    oracle = keeps and all(set(u) == full for u in units) and all(1 <= x <= n for row in grid for x in row)
    text = "/".join("".join(map(str, row)) if all(x <= 9 for x in row) else " ".join(map(str, row)) for row in grid)
    assert _correct("sudoku", problem, text) == oracle, text


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_magic_square_matches_oracle(seed, level, data):
    problem = get_task("magic_square").generate(seed, level)
    puzzle, total = problem.answer["puzzle"], problem.answer["sum"]
    square = _mutate_cells(data, [[int(x) for x in row.split()] for row in problem.solution.split("/")])
    n = len(square)
    lines = square + [list(col) for col in zip(*square)]
    lines += [[square[i][i] for i in range(n)], [square[i][n - 1 - i] for i in range(n)]]
    keeps = all(g == 0 or g == x for grow, row in zip(puzzle, square) for g, x in zip(grow, row))
    distinct = len({x for row in square for x in row}) == n * n
    oracle = keeps and distinct and all(sum(line) == total for line in lines)
    assert _correct("magic_square", problem, "/".join(" ".join(map(str, row)) for row in square)) == oracle


# -- tower of Hanoi, shortest path: sequences of moves -------------------------------------------------------
def _mutate_sequence(data, items, alphabet):
    items = list(items)
    edit = data.draw(st.sampled_from(["none", "none", "swap", "drop", "insert", "replace"]))
    if edit == "swap" and len(items) > 1:
        i = data.draw(st.integers(0, len(items) - 2))
        items[i], items[i + 1] = items[i + 1], items[i]
    elif edit == "drop" and items:
        items.pop(data.draw(st.integers(0, len(items) - 1)))
    elif edit == "insert":
        items.insert(data.draw(st.integers(0, len(items))), data.draw(st.sampled_from(alphabet)))
    elif edit == "replace" and items:
        items[data.draw(st.integers(0, len(items) - 1))] = data.draw(st.sampled_from(alphabet))
    return items


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_tower_of_hanoi_correct_only_for_optimal_legal_solutions(seed, level, data):
    problem = get_task("tower_of_hanoi").generate(seed, level)
    n, source, target = problem.answer["disks"], problem.answer["source"], problem.answer["target"]
    moves = _mutate_sequence(data, problem.solution.split(), ["AB", "BA", "AC", "CA", "BC", "CB"])
    pegs = {p: [] for p in "ABC"}
    pegs[source] = list(range(n, 0, -1))
    legal = True
    for a, b in moves:
        if not pegs[a] or (pegs[b] and pegs[b][-1] < pegs[a][-1]):
            legal = False
            break
        pegs[b].append(pegs[a].pop())
    oracle = legal and pegs[target] == list(range(n, 0, -1)) and len(moves) == 2**n - 1
    assert _correct("tower_of_hanoi", problem, " ".join(moves) or "AB") == oracle


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_shortest_path_correct_only_for_shortest_valid_paths(seed, level, data):
    problem = get_task("shortest_path").generate(seed, level)
    a = problem.answer
    edges = {frozenset(e) for e in a["edges"]}
    dist, frontier = {a["source"]: 0}, [a["source"]]
    while frontier:  # breadth-first distances over the edge set
        nxt = []
        for u in frontier:
            for v in range(a["nodes"]):
                if frozenset((u, v)) in edges and v not in dist:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    walk = _mutate_sequence(data, [int(x) for x in problem.solution.split()], list(range(a["nodes"])))
    valid = len(walk) >= 2 and walk[0] == a["source"] and walk[-1] == a["target"]
    valid = valid and all(frozenset((u, v)) in edges for u, v in zip(walk, walk[1:]))
    oracle = valid and len(walk) - 1 == dist[a["target"]]
    assert _correct("shortest_path", problem, " ".join(map(str, walk)) or "none") == oracle


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_knapsack_correct_only_for_an_optimal_packing(seed, level, data):
    problem = get_task("knapsack").generate(seed, level)
    items, capacity = problem.answer["items"], problem.answer["capacity"]
    best = 0
    for mask in range(1 << len(items)):  # every subset
        chosen = [i for i in range(len(items)) if mask >> i & 1]
        if sum(items[i][0] for i in chosen) <= capacity:
            best = max(best, sum(items[i][1] for i in chosen))
    picked = _mutate_sequence(data, [int(x) for x in problem.solution.split()], list(range(len(items) + 2)))
    fits = sum(items[i - 1][0] for i in picked if 1 <= i <= len(items)) <= capacity
    valid = len(set(picked)) == len(picked) and all(1 <= i <= len(items) for i in picked) and fits
    oracle = valid and sum(items[i - 1][1] for i in picked) == best
    assert _correct("knapsack", problem, " ".join(map(str, picked)) or "none") == oracle


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_maze_path_correct_only_for_shortest_paths_to_the_exit(seed, level, data):
    problem = get_task("maze_path").generate(seed, level)
    rows = problem.answer["maze"]
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    start = next(cell for cell, ch in cells.items() if ch == "S")
    step = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
    dist, frontier = {start: 0}, [start]
    while frontier:
        nxt = []
        for r, c in frontier:
            for dr, dc in step.values():
                cell = (r + dr, c + dc)
                if cells.get(cell, "#") != "#" and cell not in dist:
                    dist[cell] = dist[(r, c)] + 1
                    nxt.append(cell)
        frontier = nxt
    exit_ = next(cell for cell, ch in cells.items() if ch == "E")
    moves = _mutate_sequence(data, list(problem.solution), list("UDLR"))
    at, ok = start, True
    for m in moves:
        at = (at[0] + step[m][0], at[1] + step[m][1])
        ok = ok and cells.get(at, "#") != "#"
    oracle = ok and at == exit_ and len(moves) == dist[exit_]
    assert _correct("maze_path", problem, "".join(moves) or "none") == oracle
