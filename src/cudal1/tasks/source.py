"""Checking, importing and resizing the source text of a KernelBench-format task.

A task is Python source that defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()`` at module top level. Three operations live here:

- ``check_task_source`` reads the source with ``ast`` only, so loaders can reject a broken task
  with a precise message without running any of it.
- ``import_task_module`` runs the source in a fresh module object. It executes the task's code,
  so it belongs in the evaluator's trusted reference worker (tasks are trusted, candidates are
  not); it never runs candidate code.
- ``override_constants`` rewrites top-level ``NAME = value`` assignments (the size constants of
  KernelBench files), so one file serves both GPU and CPU sizes.
"""

from __future__ import annotations

import ast
import linecache
import logging
import sys
import types
from collections.abc import Mapping
from typing import Any

from cudal1.schema import Task

logger = logging.getLogger(__name__)

REQUIRED_CLASSES = ("Model",)
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


class TaskError(ValueError):
    """A task (file or record) is malformed; the message names which one and what is wrong."""


def check_task_source(source: str, where: str) -> None:
    """Raise TaskError naming ``where`` unless ``source`` parses and defines the required names."""
    tree = _parse(source, where)
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    missing = [f"class {n}" for n in REQUIRED_CLASSES if n not in defined]
    missing += [f"def {n}" for n in REQUIRED_FUNCTIONS if n not in defined]
    if missing:
        raise TaskError(f"{where}: missing at module top level: {', '.join(missing)}")


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise TaskError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    except ValueError as exc:  # e.g. null bytes in the source
        raise TaskError(f"{where}: cannot parse: {exc}") from exc


def task_filename(task: Task) -> str:
    """The name a task's code runs under: its file, or ``<name>`` for sources with no file."""
    return task.path or f"<{task.name}>"


def import_task_module(task: Task) -> types.ModuleType:
    """Execute ``task.source`` in a fresh module and check what it defines.

    The module is named after the task hash and stays in ``sys.modules`` after a successful
    import: dataclasses look their module up while the class is created, and pickle finds
    classes by module name afterwards. A failed import leaves ``sys.modules`` as it was.
    """
    where = task_filename(task)
    check_task_source(task.source, where)
    name = f"cudal1_task_{task.hash[:16]}"
    module = types.ModuleType(name)
    module.__file__ = where
    if task.path is None:
        # Lets tracebacks and inspect.getsource show lines of a source that has no file.
        lines = task.source.splitlines(keepends=True)
        linecache.cache[where] = (len(task.source), None, lines, where)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    imported = False
    try:
        _execute(task.source, module, where)
        _check_module(module, where)
        imported = True
    finally:
        if not imported:
            _restore(name, previous)
    logger.debug("imported task %s as module %s", task.name, name)
    return module


def _execute(source: str, module: types.ModuleType, where: str) -> None:
    try:
        exec(compile(source, where, "exec"), module.__dict__)
    except (Exception, SystemExit) as exc:  # KeyboardInterrupt is not the task's fault
        raise TaskError(f"{where}: failed to import: {type(exc).__name__}: {exc}") from exc


def _restore(name: str, previous: types.ModuleType | None) -> None:
    if previous is None:
        sys.modules.pop(name, None)
    else:
        sys.modules[name] = previous


def _check_module(module: types.ModuleType, where: str) -> None:
    import torch  # deferred: loading and checking tasks must not pay for importing torch

    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise TaskError(f"{where}: Model is not a subclass of torch.nn.Module")
    for fn in REQUIRED_FUNCTIONS:
        if not callable(getattr(module, fn, None)):
            raise TaskError(f"{where}: {fn} is not callable")


def override_constants(source: str, overrides: Mapping[str, Any], where: str) -> str:
    """Return ``source`` with each top-level ``NAME = <expr>`` given the literal in ``overrides``.

    Only the value text is replaced, so comments, docstrings and (for one-line values) line
    numbers stay as they were. A name that is not assigned exactly once at top level, or a
    value that is not a Python literal, is a TaskError.
    """
    if not overrides:
        return source
    spans = _assignment_spans(_parse(source, where), overrides, where)
    lines = source.splitlines(keepends=True)
    # Replace from the end so earlier offsets stay valid; ast offsets count UTF-8 bytes.
    for name, node in sorted(spans.items(), key=lambda kv: _position(kv[1]), reverse=True):
        text = _literal_text(overrides[name], name, where)
        _replace_span(lines, node, text)
    return "".join(lines)


def _assignment_spans(tree: ast.Module, overrides: Mapping[str, Any], where: str) -> dict[str, ast.expr]:
    found: dict[str, list[ast.expr]] = {name: [] for name in overrides}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in found:
            found[target.id].append(value)
    spans = {}
    for name, values in found.items():
        if len(values) != 1:
            how = "not assigned" if not values else f"assigned {len(values)} times"
            raise TaskError(f"{where}: size override {name!r} is {how} as `{name} = ...` at top level")
        spans[name] = values[0]
    return spans


def _position(node: ast.expr) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _literal_text(value: Any, name: str, where: str) -> str:
    text = repr(value)
    try:
        ok = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        ok = False
    if not ok:
        raise TaskError(f"{where}: size override {name!r} = {value!r} is not a Python literal")
    return text


def _replace_span(lines: list[str], node: ast.expr, text: str) -> None:
    assert node.end_lineno is not None and node.end_col_offset is not None
    first, last = node.lineno - 1, node.end_lineno - 1
    head = lines[first].encode("utf-8")[: node.col_offset].decode("utf-8")
    tail = lines[last].encode("utf-8")[node.end_col_offset :].decode("utf-8")
    lines[first : last + 1] = [head + text + tail]
