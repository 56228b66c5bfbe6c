"""The one strict base of every config, and the one way a config is loaded and overridden.

``StrictConfig`` forbids unknown keys (a typo is an error, not a silently ignored setting) and is
frozen (a config is a value: the one a run saves is the one it ran with). ``load_config`` reads
YAML, applies overrides through ``apply_overrides`` and validates once, so ``--set a.b=v`` strings
(values parsed as YAML) and typed values from explicit command-line flags take the same path.
A config that does not load is a ``ConfigError``: one line per problem, naming the dotted key and
what is wrong with it (an unknown key lists the keys valid where it was written).
Secrets are never stored in a config: only the name of the environment variable that holds them.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError


class StrictConfig(BaseModel):
    """Base of every config: unknown keys are an error, and instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# A torch device as the evaluator and the local LLM backend accept it; ``gpu0`` fails at load.
Device = Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:\d+)?)$")]

C = TypeVar("C", bound=BaseModel)


class ConfigError(ValueError):
    """A config that does not load: ``problems`` holds one line per bad key."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def load_config(
    model: type[C],
    path: Path | None = None,
    overrides: Sequence[str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> C:
    """``model`` from an optional YAML file, then ``a.b=value`` overrides (values parsed as YAML),
    then ``values`` (``{"a.b": value}``, already typed; a None value leaves its key alone)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([f"{path}: cannot read: {_reason(exc)}"]) from None
        except yaml.YAMLError as exc:
            raise ConfigError([f"{path}: not valid YAML: {_reason(exc)}"]) from None
        if not isinstance(loaded, dict):
            raise ConfigError([f"{path}: expected a mapping at the top level"])
        data = loaded
    apply_overrides(data, overrides or [])
    apply_overrides(data, [], {k: v for k, v in (values or {}).items() if v is not None})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(model, exc)) from None


def validation_problems(model: type[BaseModel], error: ValidationError) -> list[str]:
    """``error`` as one line per problem: ``dotted.key: what is wrong``, without pydantic's
    input dumps and links; an unknown key lists the valid keys of the section it was written in."""
    problems = []
    for e in error.errors(include_url=False):
        key = ".".join(str(part) for part in e["loc"])
        if e["type"] == "extra_forbidden":
            valid = _keys_at(model, e["loc"][:-1])
            near = difflib.get_close_matches(str(e["loc"][-1]), valid, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            where = f"; valid keys here: {', '.join(valid)}" if valid else ""
            problems.append(f"{key}: unknown key{hint}{where}")
            continue
        message = str(e["msg"]).removeprefix("Value error, ")
        value = e.get("input")
        got = f" (got {value!r})" if isinstance(value, str | int | float) and e["loc"] else ""
        problems.append(f"{key}: {message}{got}" if key else message)
    return problems


def _keys_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names of the section at ``loc`` (a validation error's path) in ``model``;
    empty where the path leads to no section (a mapping or a list item of plain values)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        if isinstance(part, int):
            continue  # a list item: the section type is the list's item type, found below
        field = current.model_fields.get(part)
        current = _section_type(field.annotation) if field is not None else None
    return list(current.model_fields) if current is not None else []


def _section_type(annotation: Any) -> type[BaseModel] | None:
    """The config class inside an annotation (``X``, ``X | None``, ``list[X]``...), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _section_type(arg)
            if found is not None:
                return found
    return None


def _reason(exc: BaseException) -> str:
    """An I/O or YAML error in one line: where in the text, and what."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], values: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``data`` (a config as a dict) with each ``a.b=value`` string (value parsed as YAML), then
    each ``{"a.b": value}`` item, set in place along its dotted path; returned."""
    items: list[tuple[str, Any]] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"override {item!r}: expected key=value"])
        try:
            items.append((key, yaml.safe_load(raw)))
        except yaml.YAMLError as exc:
            raise ConfigError([f"override {item!r}: the value is not YAML: {_reason(exc)}"]) from None
    items.extend((values or {}).items())
    for key, value in items:
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError([f"override {key!r}: {part!r} is not a section"])
            node = child
        node[leaf] = value
    return data


def dump_config(config: BaseModel) -> str:
    """``config`` as YAML that ``load_config`` reads back to an equal config."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
