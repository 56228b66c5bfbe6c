"""A tiny random causal LM and its tokenizer, built from a config (no hub): what the CPU tests
train, and (larger) the policy of the GPU learning check and training benchmark.

The recipe of shared/research/rl-stack.md (a small decoder, a BPE tokenizer trained on the texts
the run will use, a two-line Jinja chat template), with two changes for speed: the tokenizer
does not split on whitespace (``use_regex=False``), so the texts it was trained on (the prompts,
the programs) become a few long tokens and a prompt is tens of tokens, not thousands; and the
model is a Mistral, whose tokenizer class keeps that tokenizer as it is (transformers 5 rebuilds
a Qwen2 tokenizer with Qwen's regex split).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIALS = ["<unk>", "<pad>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def build_tiny_model(
    out: Path,
    corpus: Iterable[str],
    *,
    vocab: int = 4000,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    ffn_factor: int = 2,
    max_positions: int = 8192,
    seed: int = 0,
) -> Path:
    """Train the tokenizer on ``corpus``, build a random Mistral-architecture decoder (``heads``
    query heads over half as many key/value heads, its weights drawn under ``seed``), save both
    in ``out``."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(list(corpus), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|end|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    config = MistralConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=ffn_factor * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=max_positions,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    MistralForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)
    return out
