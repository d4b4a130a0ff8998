"""What every config section shares: unknown keys are refused, registered names are checked on load."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from polyrl.errors import UserError


class Strict(BaseModel):
    """A config section: an unknown key is an error."""

    model_config = ConfigDict(extra="forbid")


def registered(lookup):
    """A field validator: the value must be a name ``lookup`` knows (its one-line error otherwise)."""

    def check(cls, name):
        try:
            lookup(name)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return name

    return classmethod(check)
