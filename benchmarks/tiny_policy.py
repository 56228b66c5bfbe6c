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

The learning check's policy (``build_stacked_policy``) is built the other way round: its corpus
is cut at the boundaries of stacked programs' blocks, so each block is a few tokens and a stack
is their sequence (``split_blocks``); ``sample_policy`` draws its replies for the re-measurement.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import torch

from cudal1.config import GRPOStageConfig
from cudal1.run.database import CandidateDB
from cudal1.schema import Task
from cudal1.search.prompts import Exemplar, Message, render_contrastive_prompt, render_generation_prompt
from cudal1.search.seeds import seed_candidates
from cudal1.search.transforms import VARIANTS, stack_base, wrapper_block
from cudal1.train.datasets import format_answer
from cudal1.train.grpo import prompt_stream
from cudal1.train.models import load_policy
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


# Where a stacked program's blocks meet (``transforms.stacked_program``): the corpus is cut there.
_BLOCK_MARK = "\n\n# --- wrapper: "


def split_blocks(text: str) -> list[str]:
    """``text`` cut before each wrapper block, so the tokenizer learns no merge across two
    blocks: a stack is then a sequence of its blocks' tokens, and a stack SFT never showed is a
    sequence of tokens the policy has written, not a token it never saw."""
    head, *rest = text.split(_BLOCK_MARK)
    return [head, *(_BLOCK_MARK + part for part in rest)]


def stacked_corpus(tasks: Sequence[Task], shown_db: Path, configs: Sequence[GRPOStageConfig]) -> list[str]:
    """The learning check's texts, cut at block boundaries: the one-shot prompt and the first
    prompts of each config (shown speedups, hidden ones), every base block as an answer, and
    every wrapper block."""
    texts: list[str] = []
    with CandidateDB(shown_db) as db:
        for cfg in configs:
            for row in itertools.islice(prompt_stream(db, tasks, cfg), 2 * len(tasks)):
                texts += [m["content"] for m in row["prompt"]]
    for task in tasks:
        texts += [m["content"] for m in render_generation_prompt(task)]
        texts.append(format_answer(stack_base(task.source)))
    texts += [wrapper_block(label) + "\n```\n" for label in VARIANTS]
    return [piece for text in texts for piece in split_blocks(text)] * 3


def build_stacked_policy(
    out: Path,
    tasks: Sequence[Task],
    shown_db: Path,
    configs: Sequence[GRPOStageConfig],
    *,
    hidden: int = 256,
    layers: int = 4,
    seed: int = 0,
) -> Path:
    return build_tiny_model(
        out,
        stacked_corpus(tasks, shown_db, configs),
        vocab=16000,
        hidden=hidden,
        layers=layers,
        heads=8,
        ffn_factor=4,
        max_positions=16384,
        seed=seed,
    )


def sample_policy(
    model_dir: Path, prompts: dict[str, list[Message]], cfg: GRPOStageConfig, *, samples: int, seed: int
) -> dict[str, list[str]]:
    """``samples`` replies of the policy to each task's prompt, at ``cfg``'s sampling settings."""
    model, tokenizer = load_policy(model_dir, bf16=False)
    model.to(cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    torch.manual_seed(seed)
    out: dict[str, list[str]] = {}
    for task, prompt in prompts.items():
        ids = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True
        ).to(model.device)
        n = ids["input_ids"].shape[1]
        with torch.no_grad():
            sampled = model.generate(
                **ids,
                do_sample=True,
                temperature=cfg.sampling.temperature,
                top_p=cfg.sampling.top_p,
                num_return_sequences=samples,
                max_new_tokens=cfg.sampling.max_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        out[task] = [tokenizer.decode(s[n:], skip_special_tokens=True) for s in sampled]
    return out
