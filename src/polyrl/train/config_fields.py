"""What every config section shares: unknown keys are refused, registered names are checked on load."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A config section: an unknown key is an error."""

    model_config = ConfigDict(extra="forbid")
