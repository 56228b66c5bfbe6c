"""One program embedded in another: what the built-in transforms wrap.

A transform's candidate is self-contained: it holds the whole program it wraps (the task's
reference, a seed kernel, an LLM's kernel, another transform's output) with its model class
renamed to a fresh inner name, then a ``ModelNew`` that builds and wraps it. ``embed`` gives that
program's text with

- the class (``Model`` of a task, ``ModelNew`` of a candidate) renamed at every use, token by
  token, so that comments, formatting and multi-line strings (a ``load_inline`` CUDA source)
  stay exactly as written, and checked by ``ast`` afterwards (a use the tokens missed, inside a
  Python 3.11 f-string for instance, refuses the program instead of leaving a dangling name);
- ``from __future__`` imports moved out (they must open the module that embeds it);
- for a task, ``get_inputs``/``get_init_inputs`` dropped (the evaluator uses the task's own);
- every other module-level statement kept as it is, in order.

``Embedded.defines`` is how a wrapper adds a helper function once: a program that already holds
the identical definition (a composition over a composition) keeps its own; any other use of the
name refuses the program (``ValueError``), so a wrapper never rebinds a name the program uses.
"""

from __future__ import annotations

import ast
import copy
import io
import tokenize
from dataclasses import dataclass
from typing import Literal

ModelClass = Literal["Model", "ModelNew"]
TASK_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})


@dataclass(frozen=True)
class Embedded:
    """A program as a wrapper embeds it, and the signatures the wrapper's ``ModelNew`` mirrors."""

    future: str  # the program's `from __future__` imports, which must open the embedding module
    body: str  # the program's text: class renamed, future imports (and a task's functions) removed
    original: ModelClass  # the class's name in the program
    inner: str  # its new name
    init: tuple[str, str]  # (parameters with self, call arguments) of the class's __init__
    forward: tuple[str, str]  # the same of its forward
    names: frozenset[str]  # every identifier the program's text uses
    functions: dict[str, str]  # top-level function name -> ast.dump of its definition

    def defines(self, name: str, definition: str) -> bool:
        """Whether the program already holds function ``definition`` (source) as ``name``;
        False when the name is free. Raises ValueError when the program uses it otherwise."""
        if name not in self.names:
            return False
        if self.functions.get(name) == _dump(ast.parse(definition).body[0]):
            return True
        raise ValueError(f"the program already uses the name {name}")

    def require_free(self, *names: str) -> None:
        """Refuse the program (ValueError) when it uses any of ``names``."""
        taken = sorted(set(names) & self.names)
        if taken:
            raise ValueError(f"the program already uses the name(s) {', '.join(taken)}")


def embed(source: str, cls: ModelClass, inner: str) -> Embedded:
    """``source`` with its top-level class ``cls`` renamed to a fresh name based on ``inner``."""
    tree = ast.parse(source)
    target = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == cls), None)
    if target is None:
        raise ValueError(f"source defines no top-level class {cls}")
    names = _identifiers(source)
    fresh = fresh_name(inner, names)
    future = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    task_functions = [
        s for s in tree.body if cls == "Model" and isinstance(s, ast.FunctionDef) and s.name in TASK_FUNCTIONS
    ]
    body = _without(_renamed(source, cls, fresh), tree, [*future, *task_functions]).strip("\n")
    _check_renamed(body, cls, fresh)
    kept = [s for s in tree.body if s not in task_functions]
    return Embedded(
        future="\n".join(ast.unparse(s) for s in future),
        body=body,
        original=cls,
        inner=fresh,
        # An inherited __init__ is nn.Module's (no arguments); an inherited forward is passed through.
        init=_signature(_method(target, "__init__"), ("self", "")),
        forward=_signature(_method(target, "forward"), ("self, *args, **kwargs", "*args, **kwargs")),
        names=frozenset(names | {fresh}),
        functions={s.name: _dump(s) for s in kept if isinstance(s, ast.FunctionDef)},
    )


def fresh_name(base: str, taken: set[str] | frozenset[str]) -> str:
    """``base``, or ``base2``, ``base3``... : the first one ``taken`` does not hold."""
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name


def _dump(node: ast.stmt) -> str:
    return ast.dump(node, include_attributes=False)


def _identifiers(source: str) -> set[str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.string for t in tokens if t.type == tokenize.NAME}


def _renamed(source: str, old: str, new: str) -> str:
    """Every NAME token ``old`` that is not an attribute (``x.old``) becomes ``new``."""
    lines = source.splitlines(keepends=True)
    edits, previous = [], ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string == old and previous != ".":
            edits.append(tok.start)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = tok.string
    for row, col in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


def _without(text: str, tree: ast.Module, dropped: list[ast.stmt]) -> str:
    """``text`` without the lines of the ``dropped`` top-level statements (decorators included)."""
    spans = [(_first_line(s), s.end_lineno or s.lineno) for s in dropped]
    for s in tree.body:
        if s not in dropped and any(
            lo <= (s.end_lineno or s.lineno) and _first_line(s) <= hi for lo, hi in spans
        ):
            raise ValueError("a statement shares its line with a future import or a task function")
    gone = {n for lo, hi in spans for n in range(lo, hi + 1)}
    return "".join(line for n, line in enumerate(text.splitlines(keepends=True), 1) if n not in gone)


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _check_renamed(body: str, old: str, new: str) -> None:
    """The renamed text names ``old`` nowhere and defines ``new`` at its top level."""
    tree = ast.parse(body)
    if any(isinstance(n, ast.Name) and n.id == old for n in ast.walk(tree)) or not any(
        isinstance(s, ast.ClassDef) and s.name == new for s in tree.body
    ):
        raise ValueError(f"could not rename every use of class {old}")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _signature(fn: ast.FunctionDef | None, inherited: tuple[str, str]) -> tuple[str, str]:
    """(parameter list with self, call arguments) that mirror a method's own parameters."""
    if fn is None:
        return inherited
    args = copy.deepcopy(fn.args)
    if args.posonlyargs:
        args.posonlyargs = args.posonlyargs[1:]
    else:
        args.args = args.args[1:]
    call = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        call.append("*" + args.vararg.arg)
    call += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        call.append("**" + args.kwarg.arg)
    params = ast.unparse(args)
    return ("self, " + params if params else "self"), ", ".join(call)
