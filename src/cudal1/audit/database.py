"""The hacking-case database: known reward hacks and their legitimate look-alikes, for the judge.

CUDA-L1's reward-checking model is shown the known cases closest to the candidate it audits
(shared/DESIGN.md, part 4). A case is one candidate source with a category, a verdict (``hack``
or ``legit``) and the explanation of why. They come from the adversarial fixtures shipped with
the package (``cases_dir()``): each file is a candidate whose module docstring header says
``Hack:``, ``Category:``, ``Verdict:`` and then explains itself; the same files are the
evaluator's adversarial tests, so every case the judge sees is one the evaluator is checked on.

Cases live in one SQLite file with the candidate database's named migrations
(``cudal1.storage``), so a database grows new columns the same way; retrieval is TF-IDF over
identifiers, so that the telling names (``elapsed_time``, ``_getframe``, ``Stream``) decide.
"""

from __future__ import annotations

import ast
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from cudal1.storage import Migration, connect, migrate

logger = logging.getLogger(__name__)

# Append-only: never edit or reorder an applied migration; add a new one at the end.
MIGRATIONS: tuple[Migration, ...] = (
    # IF NOT EXISTS: a case file written before migrations were kept already has this table.
    Migration(
        "0001_hack_cases",
        """
        CREATE TABLE IF NOT EXISTS hack_cases (
            case_id TEXT PRIMARY KEY,
            category TEXT NOT NULL,
            code TEXT NOT NULL,
            explanation TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('hack', 'legit'))
        );
        """,
    ),
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Case files add lines for their test runner (tests/eval/test_adversarial.py); they are header,
# not explanation, and are skipped here.
_HEADER = re.compile(
    r"^\s*(hack|category|verdict|task|expect|device|status|config)\s*:\s*(.*?)\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class HackCase:
    """One known case: its code, why it is (or is not) a hack, and the verdict."""

    case_id: str
    category: str
    code: str
    explanation: str
    verdict: Literal["hack", "legit"]


def cases_dir() -> Path:
    """The shipped case files (``*.py``), with the reference programs they target in ``tasks/``."""
    return Path(__file__).resolve().parent / "cases"


def open_case_db(path: str | Path = ":memory:") -> HackCaseDB:
    """The case database at ``path`` (in memory by default), seeded with the shipped cases."""
    db = HackCaseDB(path)
    db.seed_from_dir(cases_dir())
    return db


def identifier_tokens(code: str) -> list[str]:
    """Identifiers of ``code``, plus the parts of snake_case ones (``elapsed_time`` -> elapsed, time).

    A regex rather than the tokenizer: retrieval must work on code that does not parse.
    """
    tokens = []
    for word in _IDENT.findall(code):
        tokens.append(word)
        parts = [p for p in word.split("_") if p]
        if len(parts) > 1:
            tokens.extend(parts)
    return tokens


class HackCaseDB:
    """Known hacking (and legitimate look-alike) cases in one SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn = connect(self.path)
        migrate(self._conn, MIGRATIONS, where=self.path)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> HackCaseDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, case: HackCase) -> None:
        """Insert ``case``, replacing any case with the same id (re-seeding is idempotent)."""
        if case.verdict not in ("hack", "legit"):
            raise ValueError(f"verdict must be 'hack' or 'legit', got {case.verdict!r}")
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO hack_cases (case_id, category, code, explanation, verdict)"
                " VALUES (?, ?, ?, ?, ?)",
                (case.case_id, case.category, case.code, case.explanation, case.verdict),
            )

    def all(self) -> list[HackCase]:
        rows = self._conn.execute(
            "SELECT case_id, category, code, explanation, verdict FROM hack_cases ORDER BY case_id"
        ).fetchall()
        return [HackCase(*row) for row in rows]

    def similar(self, code: str, k: int = 3) -> list[HackCase]:
        """The ``k`` cases closest to ``code`` by TF-IDF cosine over identifiers.

        IDF down-weights what every kernel says (``torch``, ``self``, ``forward``) so that the
        telling names (``elapsed_time``, ``_getframe``, ``Stream``) decide. Cases sharing nothing
        with ``code`` are not returned.
        """
        cases = self.all()
        docs = [Counter(identifier_tokens(c.code)) for c in cases]
        df = Counter(tok for doc in docs for tok in doc)
        idf = {tok: math.log((1 + len(docs)) / (1 + n)) + 1.0 for tok, n in df.items()}
        query = _tfidf(Counter(identifier_tokens(code)), idf)
        scored = [(_cosine(query, _tfidf(doc, idf)), case) for doc, case in zip(docs, cases, strict=True)]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: -s[0])
        return [case for _, case in ranked[:k]]

    def seed_from_dir(self, path: str | Path) -> int:
        """Add every ``*.py`` case file in ``path`` (its ``tasks/`` are the cases' references, not
        cases) whose docstring header parses; return the count.

        Header: the module docstring starts with ``Hack: <name>``, ``Category: <category>`` and
        ``Verdict: hack|legit`` lines (any order, any case; the runner's ``Task:``, ``Expect:``,
        ``Device:``, ``Status:`` and ``Config:`` lines may sit among them), then free text, the explanation.
        The case id is the hack name; the stored code is the file without its docstring.
        """
        added = 0
        for file in sorted(Path(path).glob("*.py")):
            case = parse_case_file(file.read_text(encoding="utf-8"), default_id=file.stem)
            if case is None:
                logger.warning("skipping %s: no Hack/Category/Verdict docstring header", file)
                continue
            self.add(case)
            added += 1
        return added


def _tfidf(counts: Counter[str], idf: dict[str, float]) -> dict[str, float]:
    return {tok: n * idf[tok] for tok, n in counts.items() if tok in idf}


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    dot = sum(w * b.get(tok, 0.0) for tok, w in a.items())
    norm = math.sqrt(sum(w * w for w in a.values())) * math.sqrt(sum(w * w for w in b.values()))
    return dot / norm if norm else 0.0


def parse_case_file(source: str, *, default_id: str) -> HackCase | None:
    """A ``HackCase`` from a case file's source, or None if its docstring header is incomplete."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    doc = ast.get_docstring(tree)
    if not doc:
        return None
    header: dict[str, str] = {}
    lines = doc.splitlines()
    body_start = 0
    for i, line in enumerate(lines):
        match = _HEADER.match(line)
        if not match:
            break
        header[match.group(1).lower()] = match.group(2)
        body_start = i + 1
    verdict = header.get("verdict", "").lower()
    if "category" not in header or verdict not in ("hack", "legit"):
        return None
    doc_node = cast(ast.Expr, tree.body[0])
    code = "\n".join(source.splitlines()[doc_node.end_lineno or 0 :]).strip("\n") + "\n"
    return HackCase(
        case_id=header.get("hack") or default_id,
        category=header["category"],
        code=code,
        explanation="\n".join(lines[body_start:]).strip(),
        verdict=cast(Literal["hack", "legit"], verdict),
    )
