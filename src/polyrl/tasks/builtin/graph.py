"""Graph tasks on small labelled graphs; path-finding tasks live in ``graph_paths``.

Nodes are the integers 0..n-1; an undirected graph is written as its edge list ``0-1 1-2 2-3`` and a
directed one as ``0>1 1>2``. Answers that are node sequences are integers separated by spaces or commas.
"""

from __future__ import annotations

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int, parse_int_list
from polyrl.tasks.builtin.graph_paths import edges_text
from polyrl.tasks.task_registry import register_task


@register_task("connected_components")
class ConnectedComponents(Task):
    category = "graph"
    pure = True
    description = "Count the connected components of an undirected graph (isolated nodes count too)."
    answer_shape = "a single integer"
    params = (
        Param("nodes", 4, 30, "number of nodes"),
        Param("edge_share", 0.5, 0.9, "edges per node", integer=False),
    )

    def make(self, rng, p):
        n = p["nodes"]
        pairs = {tuple(sorted(rng.sample(range(n), 2))) for _ in range(round(p["edge_share"] * n))}
        edges = sorted([a, b] for a, b in pairs)
        parent = list(range(n))

        def root(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b in edges:
            parent[root(a)] = root(b)
        count = len({root(x) for x in range(n)})
        statement = (
            f"An undirected graph has {n} nodes, numbered 0 to {n - 1}, and these edges (a-b joins nodes a and b): "
            f"{edges_text(edges)}. How many connected components does it have? A node without edges is a "
            "component of its own.\nAnswer with a single integer, for example 3."
        )
        return Example(f"components of {n} nodes: {edges_text(edges)}", count, str(count), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


@register_task("graph_coloring")
class GraphColoring(Task):
    category = "graph"
    pure = True
    description = (
        "Color the nodes with colors 1..k so that no edge joins two nodes of one color; any proper coloring counts."
    )
    answer_shape = "integers separated by spaces"
    params = (
        Param("nodes", 4, 16, "number of nodes"),
        Param("colors", 2, 4, "colors allowed"),
        Param("edge_share", 0.4, 0.6, "share of the allowed node pairs that are edges", integer=False),
    )

    def make(self, rng, p):
        n, k = p["nodes"], p["colors"]
        # Plant a coloring with every color used, then draw edges only between differently colored nodes.
        color = [i % k + 1 for i in range(n)]
        rng.shuffle(color)
        allowed = [[a, b] for a in range(n) for b in range(a + 1, n) if color[a] != color[b]]
        edges = sorted(rng.sample(allowed, max(1, round(p["edge_share"] * len(allowed)))))
        answer = {"nodes": n, "colors": k, "edges": edges}
        statement = (
            f"Color each node of an undirected graph with one of the colors 1 to {k} so that no edge joins two "
            f"nodes of the same color. The nodes are 0 to {n - 1}; the edges (a-b joins nodes a and b) are: "
            f"{edges_text(edges)}.\nAnswer with {n} integers separated by spaces, one color per node in node order: "
            f"the color of node 0 first, the color of node {n - 1} last."
        )
        question = f"colors 1-{k} for nodes 0-{n - 1}: {edges_text(edges)}"
        return Example(question, answer, " ".join(map(str, color)), statement)

    def check(self, answer: str, problem: Problem):
        n, k, edges = problem.answer["nodes"], problem.answer["colors"], problem.answer["edges"]
        color = parse_int_list(answer, n)
        if len(color) != n or any(not 1 <= c <= k for c in color):
            return 0.0, "malformed"
        return float(all(color[a] != color[b] for a, b in edges))


@register_task("topological_sort")
class TopologicalSort(Task):
    category = "graph"
    pure = True
    description = (
        "Order the nodes of a directed acyclic graph so that every edge a>b has a before b; any valid order counts."
    )
    answer_shape = "separated by spaces"
    params = (
        Param("nodes", 4, 20, "number of nodes"),
        Param("edge_share", 1.0, 2.0, "edges per node", integer=False),
    )

    def make(self, rng, p):
        n = p["nodes"]
        order = rng.sample(range(n), n)
        pairs = set()
        for _ in range(round(p["edge_share"] * n)):
            i, j = sorted(rng.sample(range(n), 2))
            pairs.add((order[i], order[j]))
        edges = sorted([a, b] for a, b in pairs)
        answer = {"nodes": n, "edges": edges}
        statement = (
            f"A directed graph has {n} nodes, numbered 0 to {n - 1}, and these edges (a>b goes from a to b): "
            f"{edges_text(edges, '>')}. Order all the nodes so that for every edge a>b, a comes before b.\n"
            "Answer with every node number once, in that order, separated by spaces (for 3 nodes, for example, "
            "2 0 1)."
        )
        return Example(f"toposort {n} nodes: {edges_text(edges, '>')}", answer, " ".join(map(str, order)), statement)

    def check(self, answer: str, problem: Problem):
        n, edges = problem.answer["nodes"], problem.answer["edges"]
        order = parse_int_list(answer, n)
        if sorted(order) != list(range(n)):
            return 0.0, "malformed"
        position = {node: i for i, node in enumerate(order)}
        return float(all(position[a] < position[b] for a, b in edges))
