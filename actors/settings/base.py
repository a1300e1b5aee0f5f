"""Checked settings: the base of every typed table, and its one-line error messages.

Every table is a pydantic model (`Settings`): unknown keys are refused, types are strict (a
TOML integer is fine where a float is wanted, `true` is no number), ranges and choices live in
the field declarations, rules between fields in validators. `check()` builds one and turns the
first error into one line naming the key, the value and what is allowed; the topology loader
adds the file and table in front. Units are in the names.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

T = TypeVar("T", bound="Settings")


class StartupError(Exception):
    """The actor cannot start (bad config, missing model or device); message is one line."""


class Settings(BaseModel):
    """Base of every checked table: unknown keys refused, strict types, checked on assignment."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    @classmethod
    def check(cls: type[T], values: dict[str, Any]) -> T:
        """Build from `values`; ValueError with one line naming the key at fault."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ValueError(describe(cls, exc.errors()[0])) from None


def _field_at(cls: type[BaseModel], loc: tuple) -> tuple[type[BaseModel], Any]:
    """The model and field an error location names, through nested models and lists."""
    model, field, annotation = cls, None, cls
    for part in loc:
        if isinstance(part, int):          # an item of a list or tuple
            annotation = next(iter(typing.get_args(annotation)), None)
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            field = model.model_fields.get(str(part))
            annotation = field.annotation if field is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        model = annotation          # the location ends at a nested table
    return model, field


def _plain(annotation: Any) -> type | None:
    """The type a value must have: `int | None` -> int, `list[X]` -> list."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    annotation = typing.get_origin(annotation) or annotation
    return annotation if isinstance(annotation, type) else None


def describe(cls: type[BaseModel], error: dict) -> str:
    """One line for a pydantic error: `key = value must ...` with what is allowed."""
    loc = ".".join(str(part) for part in error["loc"])
    value, kind = error.get("input"), error["type"]
    model, field = _field_at(cls, error["loc"][:-1] if kind == "extra_forbidden"
                             else error["loc"])
    if kind == "extra_forbidden":
        return f"unknown key {loc!r}; allowed keys: {', '.join(model.model_fields)}"
    if kind == "value_error":      # a rule of our own: its message says it all
        return str(error["ctx"]["error"])
    if field is None:
        return f"{loc}: {error['msg']}"
    if kind == "literal_error":
        choices = ", ".join(str(c) for c in typing.get_args(field.annotation))
        return f"{loc} = {value!r} is not one of: {choices}"
    bounds = {type(m).__name__: m for m in field.metadata
              if isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le,
                                annotated_types.Lt))}
    if bounds and kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal",
                           "finite_number"):
        low = bounds.get("Ge") or bounds.get("Gt")
        high = bounds.get("Le") or bounds.get("Lt")
        low_s = "" if low is None else str(getattr(low, "ge", getattr(low, "gt", "")))
        high_s = "" if high is None else str(getattr(high, "le", getattr(high, "lt", "")))
        return f"{loc} = {value!r} must be between {low_s} and {high_s}"
    expected = _plain(field.annotation)
    if expected is not None and kind.endswith(("_type", "_parsing")):
        return f"{loc} = {value!r} must be a {expected.__name__}"
    return f"{loc} = {value!r}: {error['msg']}"


def Between(low: float, high: float, default: Any, **kw) -> Any:  # noqa: N802 (reads as a type)
    """A number field in low..high (inclusive; NaN and infinities refused)."""
    return Field(default, ge=low, le=high, **kw)


def Port() -> Any:  # noqa: N802 (reads as a type)
    """A TCP port every topology must give (the default 0 is refused)."""
    return Field(0, ge=1, le=65535, validate_default=True)
