"""The one strict base of every config, and the one way a config is loaded and overridden.

``StrictConfig`` forbids unknown keys (a typo is an error, not a silently ignored setting) and is
frozen (a config is a value: the one a run saves is the one it ran with). ``load_config`` reads
YAML, applies overrides through ``apply_overrides`` and validates once, so ``--set a.b=v`` strings
(values parsed as YAML) and typed values from explicit command-line flags take the same path.
Secrets are never stored in a config: only the name of the environment variable that holds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, StringConstraints


class StrictConfig(BaseModel):
    """Base of every config: unknown keys are an error, and instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# A torch device as the evaluator and the local LLM backend accept it; ``gpu0`` fails at load.
Device = Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:\d+)?)$")]

C = TypeVar("C", bound=BaseModel)


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
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
        data = loaded
    apply_overrides(data, overrides or [])
    apply_overrides(data, [], {k: v for k, v in (values or {}).items() if v is not None})
    return model.model_validate(data)


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], values: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``data`` (a config as a dict) with each ``a.b=value`` string (value parsed as YAML), then
    each ``{"a.b": value}`` item, set in place along its dotted path; returned."""
    items: list[tuple[str, Any]] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r}: expected key=value")
        items.append((key, yaml.safe_load(raw)))
    items.extend((values or {}).items())
    for key, value in items:
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {key!r}: {part!r} is not a section")
            node = child
        node[leaf] = value
    return data


def dump_config(config: BaseModel) -> str:
    """``config`` as YAML that ``load_config`` reads back to an equal config."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
