"""A parsed candidate source for the static rules (``static``): its tree, the names its imports
bind, parent links, and every name reference resolved to a dotted path.

Resolution follows the source's own imports and assignments (``import torch.nn.functional as F``,
``from os import system``, ``cuda = torch.cuda``), so a word in a comment, a docstring or an
unrelated local variable is never a reference.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MAX_SNIPPET = 200  # characters per evidence snippet
_BUILTIN_NAMES = frozenset(dir(builtins))


def names(text: str) -> frozenset[str]:
    return frozenset(text.split())


def under(q: str | None, prefixes: Iterable[str]) -> bool:
    """True if dotted name ``q`` is one of ``prefixes`` or lies inside one of them."""
    return q is not None and any(q == p or q.startswith(p + ".") for p in prefixes)


_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class SourceInfo:
    """A parsed candidate: tree, import aliases, parent links and resolved name references."""

    text: str
    tree: ast.Module
    require_custom_kernel: bool = False
    aliases: dict[str, str] = field(default_factory=dict)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    refs: list[tuple[ast.AST, str]] = field(default_factory=list)
    _scope_names: dict[int, set[str]] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, text: str, *, require_custom_kernel: bool = False) -> SourceInfo:
        info = cls(text, ast.parse(text), require_custom_kernel)
        for node in ast.walk(info.tree):
            for child in ast.iter_child_nodes(node):
                info.parents[child] = node
        info._collect_aliases()
        info.refs = list(info._iter_refs())
        return info

    def _collect_aliases(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    root = a.name.split(".")[0]
                    self.aliases[a.asname or root] = a.name if a.asname else root
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for _ in range(2):  # `cuda = torch.cuda; ev = cuda.Event`: follow simple rebinding
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name) and target.id not in self.aliases:
                        q = self.qual(node.value)
                        if q is not None:
                            self.aliases[target.id] = q

    def qual(self, node: ast.AST) -> str | None:
        """Dotted name of a Name/Attribute chain rooted in an import or a builtin, else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        root = self.aliases.get(node.id)
        if root is None:
            if node.id not in _BUILTIN_NAMES or self._shadowed(node):
                return None
            root = f"builtins.{node.id}"
        return ".".join([root, *reversed(parts)])

    def _shadowed(self, name: ast.Name) -> bool:
        """A builtin's name bound in an enclosing scope (``def f(open): ...``) is that binding."""
        node: ast.AST | None = name
        while node is not None:
            node = self.parents.get(node)
            if isinstance(node, _SCOPES) and name.id in self._bindings(node):
                return True
        return False

    def _bindings(self, scope: ast.AST) -> set[str]:
        if id(scope) not in self._scope_names:
            names: set[str] = set()
            body = getattr(scope, "body", [])
            stack = list(body) if isinstance(body, list) else [body]
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                a = scope.args
                names |= {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x}
            while stack:
                n = stack.pop()
                if isinstance(n, _SCOPES):
                    names.add(getattr(n, "name", ""))
                    continue  # a nested scope's bindings are its own
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
                stack.extend(ast.iter_child_nodes(n))
            self._scope_names[id(scope)] = names
        return self._scope_names[id(scope)]

    def _iter_refs(self) -> Iterator[tuple[ast.AST, str]]:
        """Maximal resolvable name chains, plus every imported dotted name."""
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Import):
                yield from ((node, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield node, node.module
                yield from ((node, f"{node.module}.{a.name}") for a in node.names)
            if isinstance(node, ast.Attribute | ast.Name):
                q = self.qual(node)
                if q is not None:
                    yield node, q
                    continue
            stack.extend(ast.iter_child_nodes(node))

    def refsunder(self, prefixes: Iterable[str]) -> list[ast.AST]:
        return [node for node, q in self.refs if under(q, prefixes)]

    def calls(self) -> Iterator[tuple[ast.Call, str | None]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield node, self.qual(node.func)

    def is_with_item(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, ast.withitem) and parent.context_expr is node

    def segment(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.text, node) or ast.unparse(node)
        first = text.splitlines()[0] if text else ""
        return first if first == text and len(first) <= MAX_SNIPPET else first[:MAX_SNIPPET] + " ..."


def assigned_attrs(info: SourceInfo) -> Iterator[tuple[ast.AST, ast.expr, str]]:
    """(statement or call, owner expression, attribute) for attribute stores and ``setattr``."""
    for node in ast.walk(info.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            if info.qual(node.func) == "builtins.setattr":
                owner, key = node.args[0], node.args[1]
            elif isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__":
                owner, key = node.func.value, node.args[0]
            else:
                continue
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                yield node, owner, key.value
        while targets:
            t = targets.pop()
            if isinstance(t, ast.Tuple | ast.List):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            elif isinstance(t, ast.Attribute):
                yield node, t.value, t.attr


def is_self(owner: ast.expr) -> bool:
    """Attributes of the candidate's own objects are not harness state."""
    return isinstance(owner, ast.Name) and owner.id in {"self", "cls"}


def imported_modules(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        return {node.module or ""}
    return {a.name for a in node.names}


def cuda_strings(info: SourceInfo) -> Iterator[tuple[ast.Constant, str]]:
    """String constants holding CUDA code (``__global__``), docstrings and bare strings excluded."""
    for node in ast.walk(info.tree):
        if not isinstance(node, ast.Constant) or isinstance(info.parents.get(node), ast.Expr):
            continue
        if isinstance(node.value, str) and "__global__" in node.value:
            yield node, node.value


def unique_nodes(nodes: list[ast.AST]) -> list[ast.AST]:
    """Nodes without repeats of one source position, in source order."""
    seen: dict[tuple[int, int, int, int], ast.AST] = {}
    for n in nodes:
        pos = ("lineno", "col_offset", "end_lineno", "end_col_offset")
        seen.setdefault(tuple(getattr(n, a, 0) or 0 for a in pos), n)  # type: ignore[arg-type]
    return [seen[k] for k in sorted(seen)]
