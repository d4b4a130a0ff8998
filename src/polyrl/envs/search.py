"""``env/search``: a search agent over a local corpus of fictional entities, indexed with SQLite FTS5.

Each problem draws its own small world from the seed — people, companies and cities with relations
(``works_for``, ``born_in``, ``headquartered_in``) — writes one document per entity, and asks a question
that takes ``hops`` lookups to answer ("In which city is the company that Varo Melin works for
headquartered?"). Tools: ``search(query)`` returns the best-matching document ids and titles,
``open(doc_id)`` returns a document. Everything is fictional, so the answer cannot come from memory.
"""

from __future__ import annotations

import re
import sqlite3
import time

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask
from polyrl.envs.tool_use import tool_call_text
from polyrl.envs.tools import Tool, ToolEnvironment, ToolError
from polyrl.tasks.base import Example, Param, Problem, Task

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "kr", "st", "th")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_WORD_RE = re.compile(r"[A-Za-z0-9]+")


def _name(rng, used: set[str], syllables: int = 2) -> str:
    while True:
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)).capitalize()
        if name not in used:
            used.add(name)
            return name


def build_world(rng, people: int, companies: int, cities: int) -> dict:
    """Entities, relations and one document per entity (all JSON-serializable)."""
    used: set[str] = set()
    city = [_name(rng, used, 3) for _ in range(cities)]
    company = [f"{_name(rng, used)} {rng.choice(('Labs', 'Works', 'Group', 'Foods'))}" for _ in range(companies)]
    person = [f"{_name(rng, used)} {_name(rng, used)}" for _ in range(people)]
    hq = {c: rng.choice(city) for c in company}
    works = {p: rng.choice(company) for p in person}
    born = {p: rng.choice(city) for p in person}
    docs = []
    for c in city:
        docs.append({"title": c, "text": f"{c} is a city with {rng.randint(2, 90) * 1000} inhabitants."})
    for c in company:
        docs.append({"title": c, "text": f"{c} is a company headquartered in {hq[c]}."})
    for p in person:
        docs.append({"title": p, "text": f"{p} was born in {born[p]} and works for {works[p]}."})
    rng.shuffle(docs)
    for k, d in enumerate(docs):
        d["id"] = f"d{k}"
    return {"docs": docs, "hq": hq, "works": works, "born": born}


class SearchIndex:
    """An in-memory FTS5 index of the documents; queries are reduced to words, so no FTS syntax errors."""

    def __init__(self, docs: list[dict]):
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute("CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, title, text)")
        self.db.executemany("INSERT INTO docs VALUES (?, ?, ?)", [(d["id"], d["title"], d["text"]) for d in docs])
        self.by_id = {d["id"]: d for d in docs}

    def search(self, query: str, timeout_s: float, limit: int = 3) -> list[dict]:
        words = _WORD_RE.findall(query)[:16]
        if not words:
            raise ToolError("query has no words")
        deadline = time.monotonic() + timeout_s
        self.db.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
        try:
            rows = self.db.execute(
                "SELECT id, title FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?",
                (" OR ".join(f'"{w}"' for w in words), limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            raise ToolError(f"search failed: {exc}") from None
        finally:
            self.db.set_progress_handler(None, 0)
        return [{"id": i, "title": t} for i, t in rows]

    def close(self) -> None:
        self.db.close()


class SearchEnvironment(ToolEnvironment):
    def __init__(self, problem: Problem, task: Task, max_turns: int, timeout_s: float, tool_format: str):
        self.index = SearchIndex(problem.answer["docs"])

        def search(args, timeout):
            hits = self.index.search(args["query"], timeout)
            return "; ".join(f"{h['id']}: {h['title']}" for h in hits) or "no results"

        def open_doc(args, timeout):
            doc = self.index.by_id.get(args["doc_id"].strip())
            if doc is None:
                raise ToolError(f"no document {args['doc_id']!r}")
            return doc["text"]

        tools = [
            Tool(
                "search",
                "Search the documents; returns ids and titles.",
                {
                    "type": "object",
                    "properties": {"query": {"type": "string"}},
                    "required": ["query"],
                    "additionalProperties": False,
                },
                search,
            ),
            Tool(
                "open",
                "Read a document by id.",
                {
                    "type": "object",
                    "properties": {"doc_id": {"type": "string"}},
                    "required": ["doc_id"],
                    "additionalProperties": False,
                },
                open_doc,
            ),
        ]
        super().__init__(problem, task, tools, max_turns, timeout_s, tool_format)

    def close(self) -> None:
        self.index.close()


class SearchTask(EnvTask):
    name = "env/search"
    category = "search"
    description = "Multi-hop questions over a generated corpus, answered with search and open tools."
    params = (
        Param("hops", 1, 2, "lookups needed (1: where was X born; 2: where is X's employer headquartered)"),
        Param("people", 4, 24, "people in the world (companies and cities scale with it)"),
    )

    def __init__(self, config: EnvConfig):
        super().__init__("tags")
        self.max_turns = config.max_turns or 6
        self.tool_timeout_s = config.tool_timeout_s
        self.requested_tool_format = config.tool_format
        """``env.tool_format``: what this task's environments are asked to read tool calls in."""

    def make(self, rng, p) -> Example:
        world = build_world(rng, p["people"], max(2, p["people"] // 2), max(2, p["people"] // 2))
        person = rng.choice(sorted(world["works"]))
        if p["hops"] == 1:
            question, target = f"Where was {person} born?", world["born"][person]
        else:
            company = world["works"][person]
            question, target = (
                f"In which city is the company that {person} works for headquartered?",
                world["hq"][company],
            )
        statement = (
            "Answer a question about a made-up world of people, companies and cities; you cannot know the answer, "
            "you have to look it up. There is one document per person, company and city: find documents with the "
            "search tool (it returns their ids and titles) and read one with the open tool.\n"
            f"Question: {question}\nAnswer with the name of the city."
        )
        return Example(
            question,
            {
                "docs": world["docs"],
                "target": target,
                "person": person,
                "company": world["works"][person],
                "hops": p["hops"],
            },
            target,
            statement,
        )

    def check(self, answer: str, problem: Problem) -> float:
        return float(answer.strip().lower() == problem.answer["target"].lower())

    def make_env(self, problem: Problem) -> Environment:
        return SearchEnvironment(problem, self, self.max_turns, self.tool_timeout_s, self.requested_tool_format)

    def verify(self, problem, response):
        # the episode's final answer is scored here, so this cannot be EnvTask.verify (which plays an episode)
        return Task.verify(self, problem, response)

    def reference_actions(self, problem: Problem) -> list[str]:
        a = problem.answer
        ids = {d["title"]: d["id"] for d in a["docs"]}
        steps = [a["person"]] + ([a["company"]] if a["hops"] == 2 else [])
        actions = []
        for title in steps:
            actions += [tool_call_text("search", {"query": title}), tool_call_text("open", {"doc_id": ids[title]})]
        return actions + [self.answer_format.wrap(a["target"])]


@register_env("search")
def search_env(argument: None, config: EnvConfig) -> SearchTask:
    return SearchTask(config)
