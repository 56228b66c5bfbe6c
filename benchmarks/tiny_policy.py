"""A tiny random policy for the GPU learning check and the training benchmark (no hub there).

A Mistral-architecture decoder (random weights, a few layers) and a byte-level BPE tokenizer
trained on the texts the run will use: every task's generation and contrastive prompts and its
baseline programs as answers. The tokenizer does not split on whitespace, so those texts become
a few long tokens and the policy's choice of a program is a choice among few tokens: a small
model can learn it in minutes, which is what a learning check of the pipeline needs. It says
nothing about how a real model learns CUDA.

Only the baselines the run seeds (``labels``) are in the tokenizer's corpus: a program in the
vocabulary that the run never evaluates (a torch.compile variant, minutes to build on a GPU) is
one token away from being sampled and costs a fresh evaluation when it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cudal1.schema import Task
from cudal1.search.prompts import Exemplar, render_contrastive_prompt, render_generation_prompt
from cudal1.search.seeds import seed_candidates
from cudal1.train.datasets import format_answer
from cudal1.train.tiny_model import build_tiny_model


def corpus(tasks: Sequence[Task], labels: Sequence[str] | None = None) -> list[str]:
    texts: list[str] = []
    for task in tasks:
        seeds = seed_candidates(task, labels)
        exemplars = [Exemplar(s.source, 1.0, True, label=f"#{i} {s.label}") for i, s in enumerate(seeds)]
        prompts = render_generation_prompt(task) + render_contrastive_prompt(task, exemplars[:2])
        texts += [m["content"] for m in prompts]
        texts += [format_answer(s.source) for s in seeds]
    return texts * 3


def build_policy(
    out: Path,
    tasks: Sequence[Task],
    *,
    labels: Sequence[str] | None = None,
    hidden: int = 256,
    layers: int = 4,
    vocab: int = 16000,
) -> Path:
    return build_tiny_model(
        out,
        corpus(tasks, labels),
        vocab=vocab,
        hidden=hidden,
        layers=layers,
        heads=8,
        ffn_factor=4,
        max_positions=16384,
    )
