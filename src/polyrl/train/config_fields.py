"""What every config section shares: unknown keys are refused, registered names are checked on load, and no
number is NaN or infinite."""

from __future__ import annotations

import math
from typing import Any

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
