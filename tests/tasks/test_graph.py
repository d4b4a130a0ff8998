"""Graph tasks: reference solutions, alternative valid answers, wrong and malformed answers, difficulty."""

from polyrl import get_task
from polyrl.tasks import Problem

# A 4-cycle 0-1-3-2-0 with a tail 3-4: two shortest paths from 0 to 3, several Hamiltonian paths.
SQUARE = [[0, 1], [0, 2], [1, 3], [2, 3], [3, 4]]


def score(name, problem, answer):
    v = get_task(name).verify(problem, f"<answer>{answer}</answer>")
    return v.score, v.reason


def problem(name, answer):
    return Problem.from_dict({"task": name, "question": "hand-written", "answer": answer})


def test_graph_distance_matches_breadth_first_search():
    p = get_task("graph_distance").generate(0, {"nodes": 4, "extra_share": 0.25})
    assert score("graph_distance", p, p.solution) == (1.0, "correct")
    assert score("graph_distance", p, str(p.answer + 1)) == (0.0, "wrong")
    assert score("graph_distance", p, "1e100000") == (0.0, "malformed")


def test_shortest_path_accepts_any_shortest_path_and_partly_a_longer_walk():
    p = problem("shortest_path", {"nodes": 5, "edges": SQUARE, "source": 0, "target": 3, "steps": 2})
    assert score("shortest_path", p, "0 1 3") == (1.0, "correct")
    assert score("shortest_path", p, "[0, 2, 3]") == (1.0, "correct")
    assert score("shortest_path", p, "0 1 0 2 3") == (0.25, "partial")


def test_shortest_path_rejects_missing_edges_and_wrong_ends():
    p = problem("shortest_path", {"nodes": 5, "edges": SQUARE, "source": 0, "target": 3, "steps": 2})
    assert score("shortest_path", p, "0 3") == (0.0, "wrong")  # no edge 0-3
    assert score("shortest_path", p, "0 1") == (0.0, "wrong")
    assert score("shortest_path", p, "0 9 3") == (0.0, "wrong")
    assert score("shortest_path", p, "0 -> 1 -> 3") == (0.0, "malformed")


def test_hamiltonian_path_accepts_any_path_through_all_nodes():
    p = problem("hamiltonian_path", {"nodes": 5, "edges": SQUARE})
    assert score("hamiltonian_path", p, "1 0 2 3 4") == (1.0, "correct")
    assert score("hamiltonian_path", p, "2,0,1,3,4") == (1.0, "correct")
    assert score("hamiltonian_path", p, "0 1 3 2 4") == (0.0, "wrong")  # 2-4 is no edge
    assert score("hamiltonian_path", p, "0 1 3 4") == (0.0, "wrong")  # misses node 2
    assert score("hamiltonian_path", p, "0 1 3 2 0") == (0.0, "wrong")


def test_graph_coloring_accepts_any_proper_coloring():
    p = problem("graph_coloring", {"nodes": 5, "colors": 3, "edges": SQUARE})
    assert score("graph_coloring", p, "1 2 2 1 2") == (1.0, "correct")
    assert score("graph_coloring", p, "3 1 2 3 1") == (1.0, "correct")
    assert score("graph_coloring", p, "1 1 2 3 1") == (0.0, "wrong")  # edge 0-1 is monochrome
    assert score("graph_coloring", p, "1 2 2 1 4") == (0.0, "malformed")  # only 3 colors allowed
    assert score("graph_coloring", p, "1 2 2 1") == (0.0, "malformed")


def test_generated_coloring_problems_are_colorable_with_k_colors():
    t = get_task("graph_coloring")
    for seed in range(20):
        p = t.generate(seed, "hard")
        colors = [int(c) for c in p.solution.split()]
        assert max(colors) <= p.answer["colors"] and all(colors[a] != colors[b] for a, b in p.answer["edges"])


def test_connected_components_counts_isolated_nodes():
    p = get_task("connected_components").generate(0, {"nodes": 4, "edge_share": 0.5})
    assert p.question.startswith("components of 4 nodes:")
    assert score("connected_components", problem("connected_components", 3), "3") == (1.0, "correct")
    assert score("connected_components", problem("connected_components", 3), "2") == (0.0, "wrong")


def test_topological_sort_accepts_any_order_respecting_the_edges():
    p = problem("topological_sort", {"nodes": 4, "edges": [[0, 2], [1, 2], [2, 3]]})
    assert score("topological_sort", p, "0 1 2 3") == (1.0, "correct")
    assert score("topological_sort", p, "1 0 2 3") == (1.0, "correct")
    assert score("topological_sort", p, "0 2 1 3") == (0.0, "wrong")
    assert score("topological_sort", p, "0 1 2") == (0.0, "malformed")
    assert score("topological_sort", p, "0 1 2 2 3") == (0.0, "malformed")
