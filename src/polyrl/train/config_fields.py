"""What every config section shares: unknown keys are refused, registered names are checked on load, no number
is NaN or infinite, and no number is a boolean."""

from __future__ import annotations

import math
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A config section: an unknown key is an error, and so is a NaN or infinite number (in the sections that are
    not Strict, ``TrainConfig`` finds them with :func:`first_nonfinite_field`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def first_nonfinite_field(value: Any, path: str = "") -> tuple[str, float] | None:
    """The dotted name and value of the first NaN or infinite float in ``value`` (a config section, and the
    mappings and lists in it: the free-form options of samplers, engines and objectives too), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, BaseModel):
        items = ((name, getattr(value, name)) for name in type(value).model_fields)
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = first_nonfinite_field(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _alternatives(annotation: Any) -> list[Any]:
    """The types a field's annotation admits: ``int | None`` is ``[int, NoneType]``; ``Annotated[X, ...]`` is X's."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _alternatives(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [t for arg in get_args(annotation) for t in _alternatives(arg)]
    return [annotation]


def first_bool_number(data: Any, annotation: Any, path: str = "") -> tuple[str, bool] | None:
    """The dotted name and value of the first boolean in raw config ``data`` where ``annotation`` (a config class,
    and the sections, lists and mappings in it) takes a number and not a boolean; None if there is none.

    pydantic takes ``true`` for ``1`` in an int or float field, and a YAML ``rl.steps=true`` trained one step
    (issue #43). Strings are left to pydantic: ``rl.steps=3`` arrives as the integer 3 (overrides are YAML), and a
    quoted ``"3"`` is still read as 3."""
    kinds = _alternatives(annotation)
    if isinstance(data, bool):
        number = any(k in (int, float) for k in kinds)
        return (path, data) if number and not any(k is bool or k is Any for k in kinds) else None
    sections = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
    if isinstance(data, dict) and sections:
        fields = {(f.alias or name): f for name, f in sections[0].model_fields.items()}
        items = ((key, fields[key].annotation) for key in data if key in fields)
    elif isinstance(data, dict) and any(get_origin(k) is dict for k in kinds):
        value_type = next((get_args(k) for k in kinds if get_origin(k) is dict), ())
        items = ((key, value_type[1] if value_type else Any) for key in data)
    elif isinstance(data, list) and any(get_origin(k) in (list, tuple) for k in kinds):
        item_type = next((get_args(k) for k in kinds if get_origin(k) in (list, tuple)), ())
        items = ((i, item_type[0] if item_type else Any) for i in range(len(data)))
    else:
        return None
    for key, inner in items:
        found = first_bool_number(data[key], inner, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None
