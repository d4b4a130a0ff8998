"""Generate the config reference (docs/config.md) from the fields' one-line descriptions.

python -m polyrl.train.config_docs > docs/config.md
"""

from __future__ import annotations

from pydantic import BaseModel

from polyrl.train.config import TrainConfig


def _default(field) -> str:
    if field.is_required():
        return "(required)"
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(section)"
        return f"`{value!r}`"
    return f"`{field.default!r}`"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        rows.append(f"| `{key}` | {_default(field)} | {field.description or ''} |")
        if section:
            rows += _rows(annotation, f"{key}.")
    return rows


def config_reference() -> str:
    head = [
        "# Training config reference",
        "",
        "Generated from the config classes by `python -m polyrl.train.config_docs`; do not edit by hand.",
        "Every field can be set in the YAML file or overridden on the command line as `key=value`",
        "(e.g. `polyrl train rl.steps=50 rl.advantage=rloo`). Each entry of `tasks` is a task name or a mapping",
        "with `name`, `difficulty` and `eval_difficulty`.",
        "",
        "| field | default | description |",
        "|---|---|---|",
    ]
    return "\n".join(head + _rows(TrainConfig)) + "\n"


if __name__ == "__main__":
    print(config_reference(), end="")
