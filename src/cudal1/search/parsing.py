"""Extract the performance analysis and the ``ModelNew`` source from a model's reply.

The contrastive protocol asks for an analysis first, then one complete ``ModelNew`` in a
fenced python block. Real replies stray from that: reasoning models wrap their thinking in
``<think>…</think>`` (or, when the chat template opened the tag, emit only the closing one),
CUDA/C++ sources come in their own ``cpp``/``cuda`` blocks before the python one, python is
sometimes tagged ``cuda`` or not tagged at all, drafts precede the final version, replies cut
off by ``max_tokens`` end inside a fence, and some servers send CRLF. The rules here follow
shared/research/rl-stack.md section 3:

- strip reasoning; split fenced blocks line by line, any language tag, and accept an
  unterminated last fence (the reply is then marked truncated);
- choose the LAST block that defines ``ModelNew`` (the model's final answer, not a draft);
- with no fences at all, accept the reply (or its tail from the first import/class line) when
  it parses and defines ``ModelNew``;
- ``ast.parse`` the choice, so that a syntax error is reported here, with its line, instead of
  costing a worker process.

Every failure comes back as a reason a human can read; nothing here raises on model output.
"""

from __future__ import annotations

import ast
import logging
import re
import textwrap
from dataclasses import dataclass

log = logging.getLogger(__name__)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^`]*$")
_MODELNEW_LINE = re.compile(r"^[ \t]*class[ \t]+ModelNew\b[ \t]*[(:]", re.MULTILINE)
_CODE_START = re.compile(r"^(import |from |class |@|def )")
_C_FAMILY = frozenset({"c", "cpp", "c++", "cxx", "cu", "cuda", "h", "hpp"})


@dataclass(frozen=True)
class Extraction:
    """What a reply yielded. ``code`` is ready for evaluation only when ``ok`` (``error`` is None);
    with an error it still holds the chosen text, for the database and for a human."""

    analysis: str
    code: str | None
    truncated: bool
    error: str | None

    @property
    def ok(self) -> bool:
        return self.code is not None and self.error is None


@dataclass(frozen=True)
class _Block:
    lang: str
    code: str
    start: int  # offset of the opening fence in the cleaned text
    terminated: bool


def _normalise(text: str) -> str:
    return text.replace("\ufeff", "").replace("\r\n", "\n").replace("\r", "\n")


def _strip_think(text: str) -> tuple[str, bool]:
    """Remove reasoning; returns (visible text, ended inside an unclosed <think>)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    if "</think>" in text:  # the template opened <think> in the prompt: the reply starts inside it
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return text.split("<think>", 1)[0], True
    return text, False


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.splitlines(keepends=True)
    offset, i = 0, 0
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\n"))
        if not m:
            offset += len(lines[i])
            i += 1
            continue
        start, ticks, indent = offset, m["ticks"], m["indent"]
        body: list[str] = []
        offset += len(lines[i])
        i += 1
        terminated = False
        while i < len(lines):
            line = lines[i]
            offset += len(line)
            i += 1
            stripped = line.strip()
            if stripped.startswith(ticks[0] * len(ticks)) and set(stripped) == {ticks[0]}:
                terminated = True
                break
            body.append(line)
        code = textwrap.dedent("".join(body)) if indent else "".join(body)
        blocks.append(_Block(m["lang"].lower(), code, start, terminated))
    return blocks


def _parse(code: str) -> tuple[ast.Module | None, str | None]:
    try:
        return ast.parse(code), None
    except SyntaxError as e:
        lines = code.splitlines()
        where = f"line {e.lineno}" if e.lineno else "end of code"
        context = ""
        if e.lineno and 0 < e.lineno <= len(lines):
            context = f" in {lines[e.lineno - 1].strip()[:80]!r}"
        return None, f"{where}: {e.msg}{context}"


def _defines_modelnew(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets
        ):
            return True
    return False


def _is_modelnew_block(block: _Block) -> bool:
    """Parses and defines ModelNew, or is a broken Python attempt at it (reported, not skipped)."""
    tree, _ = _parse(block.code)
    if tree is not None:
        return _defines_modelnew(tree)
    return block.lang not in _C_FAMILY and bool(_MODELNEW_LINE.search(block.code))


def _unfenced(text: str) -> tuple[str, str] | None:
    """(analysis, code) for a reply with no fences whose tail is a Python source defining ModelNew."""
    if not _MODELNEW_LINE.search(text):
        return None
    offset = 0
    starts = [0]
    for line in text.splitlines(keepends=True):
        if offset and _CODE_START.match(line):
            starts.append(offset)
        offset += len(line)
    for start in starts:
        tree, _ = _parse(text[start:])
        if tree is not None and _defines_modelnew(tree):
            return text[:start].strip(), text[start:].strip("\n") + "\n"
    return None


def extract(text: str) -> Extraction:
    """Split a reply into its analysis and its final ``ModelNew`` source (see the module doc)."""
    visible, in_think = _strip_think(_normalise(text or ""))
    if not visible.strip():
        reason = "reply ended inside <think> (reasoning truncated), no code" if in_think else "empty reply"
        return Extraction("", None, in_think, reason)
    blocks = _fenced_blocks(visible)
    truncated = in_think or bool(blocks and not blocks[-1].terminated)
    chosen = next((b for b in reversed(blocks) if _is_modelnew_block(b)), None)
    if chosen is None:
        found = _unfenced(visible) if not blocks else None
        if found is not None:
            return Extraction(found[0], found[1], truncated, None)
        langs = ", ".join(b.lang or "untagged" for b in blocks)
        detail = f" (found {len(blocks)} code block(s): {langs})" if blocks else " (reply has no code block)"
        return Extraction(visible.strip(), None, truncated, "no code block defines class ModelNew" + detail)
    analysis = visible[: chosen.start].strip()
    tree, syntax = _parse(chosen.code)
    if syntax is None:
        return Extraction(analysis, chosen.code, truncated, None)
    if not chosen.terminated:
        return Extraction(
            analysis,
            chosen.code,
            True,
            f"code block is truncated (unterminated fence) and does not parse: {syntax}",
        )
    return Extraction(analysis, chosen.code, truncated, f"code does not parse: {syntax}")
