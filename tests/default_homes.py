"""The finder of second homes of defaults in ``src/polyrl`` (what counts: tests/test_one_home_for_defaults.py);
importable as ``default_homes`` (``tests/`` is on the path)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

SRC = Path(__file__).resolve().parents[1] / "src" / "polyrl"

NOT_CONFIG = ("polyrl.serve.schema", "polyrl.rollout.harness.openai_chat")
"""Modules of request and message schemas: their defaults are the OpenAI API's, not polyrl settings."""

ALIASES = {
    "shared_prefill": "share_prompts",
    "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "enforce_eager": "vllm_enforce_eager",
    "VLLMBackend.__init__.dtype": "vllm_dtype",
    "max_model_len": "vllm_max_model_len",
    "aggregation": "loss_aggregation",
    "env_concurrency": "concurrency",
    "requested_tool_format": "tool_format",
    "keep_memory": "keep_freed_memory",
    "AnswerFormat.style": "answer_format",
    "Progress.__init__.enabled": "progress",
}
"""Parameter (``name`` or ``Qualname.name``) → the config field it carries under another name."""

HOMONYMS = {
    "split": "the seed space of a problem (train or eval), not DatasetSpec.split, a hub dataset's split",
    "enabled": "each config section's own switch; a parameter of that name is some other switch",
    "seed": "the start of each function's own random stream (a problem's, a fresh model's, a tool's), not the run",
    "LocalModelSource.__init__.batch_size": "sequences `polyrl eval` generates together, not SFT examples",
    "qa.retries": "`polyrl synth qa`'s endpoint retries, not the judge's (JudgeConfig.retries)",
    "export_cmd.seed_start": "the first seed `polyrl tasks export` writes, not an eval suite's first seed",
}
"""Parameter names (or ``Qualname.name``) that are a config field's name but mean something else where used."""

INDEPENDENT = {
    "enabled": "each section's own switch",
    "max_grad_norm": "the policy's and the critic's optimizers clip separately",
    "warmup_steps": "SFT, RL and critic warmups are separate schedules",
    "batch_size": "SFT examples per step, reward-model completions per forward, generation sequences at once",
    "seed": "the run's seed, and `polyrl eval`'s local sampler seed",
}
"""Field names shared by config classes whose equal literal defaults are separate knobs, with why."""


@dataclass(frozen=True)
class Site:
    """One default written in a signature or a dataclass field."""

    where: str
    """``path:line qualname``."""
    qualname: str
    name: str
    node: ast.expr


def _modules() -> list[Any]:
    """Every module of polyrl, imported (the CLI's ``__main__`` aside)."""
    import polyrl

    names = [m.name for m in pkgutil.walk_packages(polyrl.__path__, "polyrl.") if not m.name.endswith("__main__")]
    return [importlib.import_module(name) for name in names]


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def config_classes() -> list[type[BaseModel]]:
    """Every pydantic model in polyrl that holds settings (see :data:`NOT_CONFIG`)."""
    _modules()
    found = {
        c
        for c in _subclasses(BaseModel)
        if c.__module__.startswith("polyrl.") and not c.__module__.startswith(NOT_CONFIG) and c.model_fields
    }
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def _field_nodes(cls: type[BaseModel]) -> dict[str, ast.expr]:
    """Field name → the expression of its default as written in the class."""
    (node,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    out = {}
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            value = stmt.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
                value = (
                    value.args[0]
                    if value.args
                    else next((k.value for k in value.keywords if k.arg == "default"), None)
                )
            if value is not None:
                out[stmt.target.id] = value
    return out


@dataclass(frozen=True)
class ConfigField:
    """One config field with a default: its class, name, value and the expression written for it."""

    owner: str
    name: str
    default: Any
    node: ast.expr | None


def config_fields() -> dict[str, list[ConfigField]]:
    """Field name → every config field of that name with a default (not None, not a factory)."""
    out: dict[str, list[ConfigField]] = defaultdict(list)
    for cls in config_classes():
        nodes = _field_nodes(cls)
        for name, field in cls.model_fields.items():
            if field.default is PydanticUndefined or field.default is None:
                continue
            out[name].append(ConfigField(cls.__qualname__, name, field.default, nodes.get(name)))
    return out


def _literal(node: ast.expr | None) -> Any:
    """The value of a literal expression (``1.0``, ``-1``, ``"tags"``, ``(1, 2)``); ``...`` when not a literal."""
    if node is None:
        return ...
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ...


def same(a: Any, b: Any) -> bool:
    """Equal as defaults: a bool only equals a bool; ``1`` equals ``1.0``; a torch device equals its name."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if type(a).__name__ == "device" or type(b).__name__ == "device":
        return str(a) == str(b)
    return type(a) is type(b) and a == b


def _is_dataclass_or_tuple(node: ast.ClassDef) -> bool:
    def name(expr):
        expr = expr.func if isinstance(expr, ast.Call) else expr
        return getattr(expr, "id", getattr(expr, "attr", ""))

    return any(name(d) == "dataclass" for d in node.decorator_list) or any(name(b) == "NamedTuple" for b in node.bases)


def _signature_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    out = []
    for arg, default in pairs:
        if isinstance(default, ast.Call) and getattr(default.func, "attr", None) in ("Option", "Argument"):
            if not default.args:
                continue
            default = default.args[0]  # typer.Option(DEFAULT, "--flag", ...)
        out.append((arg.arg, default))
    return out


def sites_in(source: str, path: str) -> list[Site]:
    """Every default of ``source``'s signatures and dataclass / NamedTuple fields."""
    found: list[Site] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{prefix}{child.name}"
                for name, default in _signature_defaults(child):
                    found.append(Site(f"{path}:{child.lineno} {qual}", qual, name, default))
                visit(child, qual + ".")
            elif isinstance(child, ast.ClassDef):
                qual = f"{prefix}{child.name}"
                if _is_dataclass_or_tuple(child):
                    for stmt in child.body:
                        if (
                            isinstance(stmt, ast.AnnAssign)
                            and isinstance(stmt.target, ast.Name)
                            and stmt.value is not None
                            and "ClassVar" not in ast.unparse(stmt.annotation)
                        ):
                            found.append(Site(f"{path}:{stmt.lineno} {qual}", qual, stmt.target.id, stmt.value))
                visit(child, qual + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def all_sites() -> list[Site]:
    """Every default written in ``src/polyrl``."""
    return [
        site
        for path in sorted(SRC.rglob("*.py"))
        for site in sites_in(path.read_text(encoding="utf-8"), str(path.relative_to(SRC.parents[1])))
    ]


def _lookup(table: dict[str, str], site: Site) -> str | None:
    """``table``'s entry for ``site``'s parameter: ``Qualname.name`` first, then the bare name."""
    return table.get(f"{site.qualname}.{site.name}", table.get(site.name))


def restated_config_defaults(sites: list[Site], fields: dict[str, list[ConfigField]]) -> list[str]:
    """Rule 1: one line per parameter, naming every config field it restates or (an alias) disagrees with."""
    out = []
    for site in sites:
        value = _literal(site.node)
        if value is ... or value is None or _lookup(HOMONYMS, site) is not None:
            continue
        alias = _lookup(ALIASES, site)
        matching = fields.get(alias or site.name, [])
        restated = [f"{f.owner}.{f.name}" for f in matching if same(value, f.default)]
        if restated:
            out.append(f"{site.where}({site.name}={value!r}) restates {', '.join(restated)}")
        elif alias is not None and matching:
            theirs = ", ".join(f"{f.owner}.{f.name}={f.default!r}" for f in matching)
            out.append(f"{site.where}({site.name}={value!r}) disagrees with {theirs}")
    return out


def _module_of(site: Site) -> str:
    parts = Path(site.where.split(":")[0]).with_suffix("").parts[1:]  # without "src"
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Constant:
    """A named constant that a signature gives a parameter as its default."""

    site: Site
    name: str
    value: Any


def named_constants(sites: list[Site]) -> list[Constant]:
    """The named constants (a number, string, tuple or torch device) that ``sites`` give as defaults."""
    out = []
    for site in sites:
        if isinstance(site.node, ast.Name | ast.Attribute):
            namespace = vars(importlib.import_module(_module_of(site)))
            try:
                value = eval(compile(ast.Expression(site.node), "<default>", "eval"), namespace)
            except (NameError, AttributeError):
                continue
            if isinstance(value, int | float | str | tuple) or type(value).__name__ == "device":
                out.append(Constant(site, ast.unparse(site.node), value))
    return out


def restated_constants(
    sites: list[Site], constants: list[Constant], fields: dict[str, list[ConfigField]]
) -> list[str]:
    """Rule 2 (a parameter rule 1 reports already is not reported twice)."""
    out = []
    for site in sites:
        value = _literal(site.node)
        if value is ... or value is None or _lookup(HOMONYMS, site) is not None:
            continue
        if restated_config_defaults([site], fields):
            continue
        match = next((c for c in constants if c.site.name == site.name and same(value, c.value)), None)
        if match is not None:
            out.append(f"{site.where}({site.name}={value!r}) restates {match.name}")
    return out


def literal_fields_beside_constants(fields: dict[str, list[ConfigField]], constants: list[Constant]) -> list[str]:
    """Rule 3."""
    out = []
    for constant in constants:
        name = _lookup(ALIASES, constant.site) or constant.site.name
        for field in fields.get(name, []):
            if _literal(field.node) is not ... and same(field.default, constant.value):
                line = f"{field.owner}.{field.name}={field.default!r} is a literal beside {constant.name}"
                if line not in out:
                    out.append(line)
    return out


def library_classes() -> list[type]:
    """Every class defined in a polyrl module."""
    found = {
        cls
        for module in _modules()
        for cls in vars(module).values()
        if inspect.isclass(cls) and cls.__module__ == module.__name__
    }
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def override_defaults(classes: list[type]) -> list[str]:
    """Rule 4."""
    out = []
    for cls in classes:
        for attr, fn in vars(cls).items():
            if attr == "__init__" or not inspect.isfunction(fn):
                continue
            base = next((b for b in cls.__mro__[1:] if inspect.isfunction(vars(b).get(attr))), None)
            if base is None:
                continue
            theirs = inspect.signature(vars(base)[attr]).parameters
            for name, mine in inspect.signature(fn).parameters.items():
                protocol = theirs.get(name)
                if protocol is None or mine.default is mine.empty or protocol.default is protocol.empty:
                    continue
                if not same(mine.default, protocol.default):
                    out.append(
                        f"{cls.__module__}.{cls.__qualname__}.{attr}({name}={mine.default!r}) overrides "
                        f"{base.__qualname__}.{attr}({name}={protocol.default!r})"
                    )
    return out


def twin_fields(fields: dict[str, list[ConfigField]]) -> list[str]:
    """Rule 5."""
    out = []
    for name, entries in fields.items():
        if name in INDEPENDENT:
            continue
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                one_constant = (
                    _literal(a.node) is ...
                    and _literal(b.node) is ...
                    and a.node is not None
                    and b.node is not None
                    and ast.unparse(a.node) == ast.unparse(b.node)
                )
                if same(a.default, b.default) and not one_constant:
                    out.append(f"{a.owner}.{name} and {b.owner}.{name} both default to {a.default!r}")
    return out


def second_homes() -> list[str]:
    """Every second home of a default in ``src/polyrl``, one line each."""
    sites = all_sites()
    fields = config_fields()
    constants = named_constants(sites)
    return (
        restated_config_defaults(sites, fields)
        + restated_constants(sites, constants, fields)
        + literal_fields_beside_constants(fields, constants)
        + override_defaults(library_classes())
        + twin_fields(fields)
    )
