"""A tiny random policy for the GPU learning check and the training benchmark (no hub there).

A Mistral-architecture decoder (random weights, a few layers) and a byte-level BPE tokenizer
trained on the texts the run will use: every task's generation and contrastive prompts and its
baseline programs as answers. The tokenizer does not split on whitespace, so those texts become
a few long tokens and the policy's choice of a program is a choice among few tokens: a small
model can learn it in minutes, which is what a learning check of the pipeline needs. It says
nothing about how a real model learns CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

from cudal1.schema import Task
from cudal1.search.contrastive import seed_candidates
from cudal1.search.prompts import Exemplar, render_contrastive_prompt, render_generation_prompt
from cudal1.train.datasets import format_answer

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIALS = ["<unk>", "<pad>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def corpus(tasks: Sequence[Task]) -> list[str]:
    texts: list[str] = []
    for task in tasks:
        seeds = seed_candidates(task, None)
        exemplars = [Exemplar(src, 1.0, True, label=f"#{i} {label}") for i, (label, src) in enumerate(seeds)]
        prompts = render_generation_prompt(task) + render_contrastive_prompt(task, exemplars[:2])
        texts += [m["content"] for m in prompts]
        texts += [format_answer(src) for _, src in seeds]
    return texts * 3


def build_policy(
    out: Path, tasks: Sequence[Task], *, hidden: int = 256, layers: int = 4, vocab: int = 16000
) -> Path:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(tasks), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|end|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    config = MistralConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=16384,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    MistralForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)
    return out
