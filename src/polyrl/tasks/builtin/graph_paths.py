"""Path tasks on undirected graphs: BFS distance, a shortest path, a Hamiltonian path."""

from __future__ import annotations

from collections import deque

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int, parse_int_list
from polyrl.tasks.task_registry import register_task


def edges_text(edges: list[list[int]], sep: str = "-") -> str:
    return " ".join(f"{a}{sep}{b}" for a, b in edges)


def random_connected_graph(rng, n: int, extra: int) -> list[list[int]]:
    """A random spanning tree on n nodes plus ``extra`` further edges, as sorted ``[a, b]`` pairs (a < b)."""
    label = rng.sample(range(n), n)
    pairs = {tuple(sorted((label[i], label[rng.randrange(i)]))) for i in range(1, n)}
    for _ in range(extra):  # duplicates collapse, so a dense request can give slightly fewer edges
        pairs.add(tuple(sorted(rng.sample(range(n), 2))))
    return sorted([a, b] for a, b in pairs)


def adjacency(n: int, edges: list[list[int]]) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    return adj


def bfs_parents(adj: list[set[int]], source: int) -> dict[int, int]:
    """Breadth-first parent of every node reachable from ``source`` (the source maps to itself)."""
    parent = {source: source}
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in sorted(adj[u]):  # sorted: the reference path must not depend on set order
            if v not in parent:
                parent[v] = u
                queue.append(v)
    return parent


def _walk_is_valid(adj: list[set[int]], walk: list[int]) -> bool:
    return all(0 <= u < len(adj) for u in walk) and all(b in adj[a] for a, b in zip(walk, walk[1:]))


def _source_target_path(rng, p) -> tuple[list[list[int]], int, int, list[int]]:
    """A connected graph, two distinct nodes and a shortest path between them."""
    n = p["nodes"]
    edges = random_connected_graph(rng, n, round(p["extra_share"] * n))
    source, target = rng.sample(range(n), 2)
    parent = bfs_parents(adjacency(n, edges), source)
    path = [target]
    while path[-1] != source:
        path.append(parent[path[-1]])
    return edges, source, target, path[::-1]


_PATH_PARAMS = (
    Param("nodes", 4, 30, "number of nodes"),
    Param("extra_share", 0.25, 0.8, "edges beyond a spanning tree, per node", integer=False),
)


@register_task("graph_distance")
class GraphDistance(Task):
    category = "graph"
    pure = True
    description = "The number of edges on a shortest path between two nodes of an undirected graph."
    answer_shape = "a single integer"
    params = _PATH_PARAMS

    def make(self, rng, p):
        edges, source, target, path = _source_target_path(rng, p)
        steps = len(path) - 1
        statement = (
            f"An undirected graph has these edges (a-b joins nodes a and b): {edges_text(edges)}. How many edges "
            f"are on a shortest path from node {source} to node {target}?\n"
            "Answer with a single integer: the number of edges on that path."
        )
        return Example(f"dist {source} {target}: {edges_text(edges)}", steps, str(steps), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


@register_task("shortest_path")
class ShortestPath(Task):
    category = "graph"
    pure = True
    description = (
        "A shortest path between two nodes, as its node sequence; any shortest path scores 1, longer walks partial."
    )
    params = _PATH_PARAMS
    partial_credit = True
    answer_shape = "separated by spaces"

    def make(self, rng, p):
        edges, source, target, path = _source_target_path(rng, p)
        answer = {"nodes": p["nodes"], "edges": edges, "source": source, "target": target, "steps": len(path) - 1}
        statement = (
            f"An undirected graph has these edges (a-b joins nodes a and b): {edges_text(edges)}. Find a shortest "
            f"path from node {source} to node {target}, moving only along edges.\n"
            "Answer with the nodes of the path in order, from the first node to the last, separated by spaces "
            "(a path from node 5 to node 8, for example, is written 5 3 8)."
        )
        return Example(f"path {source} {target}: {edges_text(edges)}", answer, " ".join(map(str, path)), statement)

    def check(self, answer: str, problem: Problem):
        a = problem.answer
        walk = parse_int_list(answer, 1000)
        if len(walk) < 2 or walk[0] != a["source"] or walk[-1] != a["target"]:
            return 0.0, "wrong"
        if not _walk_is_valid(adjacency(a["nodes"], a["edges"]), walk):
            return 0.0, "wrong"
        steps = len(walk) - 1
        # A valid but longer walk reaches the target: credit shrinks with the detour, below a full solve.
        return 1.0 if steps == a["steps"] else 0.5 * a["steps"] / steps


@register_task("hamiltonian_path")
class HamiltonianPath(Task):
    category = "graph"
    pure = True
    description = "A path that visits every node exactly once; any such path counts."
    answer_shape = "separated by spaces"
    params = (
        Param("nodes", 5, 12, "number of nodes"),
        Param("extra_share", 0.4, 1.0, "edges beyond the planted path, per node", integer=False),
    )

    def make(self, rng, p):
        n = p["nodes"]
        # Plant a random Hamiltonian path, then hide it among extra random edges.
        path = rng.sample(range(n), n)
        pairs = {tuple(sorted(ab)) for ab in zip(path, path[1:])}
        for _ in range(round(p["extra_share"] * n)):
            pairs.add(tuple(sorted(rng.sample(range(n), 2))))
        edges = sorted([a, b] for a, b in pairs)
        statement = (
            f"An undirected graph has {n} nodes, numbered 0 to {n - 1}, and these edges (a-b joins nodes a and b): "
            f"{edges_text(edges)}. Find a path that visits every node exactly once, moving only along edges.\n"
            f"Answer with the {n} node numbers in visiting order, separated by spaces (for 4 nodes, for example, "
            "3 0 2 1)."
        )
        answer = {"nodes": n, "edges": edges}
        return Example(f"hampath {edges_text(edges)}", answer, " ".join(map(str, path)), statement)

    def check(self, answer: str, problem: Problem):
        n, edges = problem.answer["nodes"], problem.answer["edges"]
        walk = parse_int_list(answer, n)
        if sorted(walk) != list(range(n)):
            return 0.0, "wrong"
        return float(_walk_is_valid(adjacency(n, edges), walk))
