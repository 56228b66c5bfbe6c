"""Reward-hacking audit: the reward-checking model and the hacking-case database it is shown.

``open_case_db()`` opens a case database seeded with the cases shipped in ``cases_dir()``;
``should_audit(result, threshold)`` says which results need a judge; ``LLMJudge(backend)`` asks a
``cudal1.llm`` backend, ``ScriptedJudge`` replays verdicts for tests and dry runs.
"""

from cudal1.audit.database import (
    HackCase,
    HackCaseDB,
    cases_dir,
    identifier_tokens,
    open_case_db,
    parse_case_file,
)
from cudal1.audit.judge import (
    SYSTEM_PROMPT,
    Judge,
    JudgeVerdict,
    LLMJudge,
    ScriptedJudge,
    VerdictLabel,
    build_judge_prompt,
    parse_judge_reply,
    should_audit,
)

__all__ = [
    "SYSTEM_PROMPT",
    "HackCase",
    "HackCaseDB",
    "Judge",
    "JudgeVerdict",
    "LLMJudge",
    "ScriptedJudge",
    "VerdictLabel",
    "build_judge_prompt",
    "cases_dir",
    "identifier_tokens",
    "open_case_db",
    "parse_case_file",
    "parse_judge_reply",
    "should_audit",
]
