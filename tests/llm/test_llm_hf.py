"""The local transformers backend on CPU, with a tiny random Qwen2 model and tokenizer built here.

Nothing is downloaded: the tokenizer is trained on a few sentences with ``tokenizers``, the model
is initialised from a config, both are saved to a temporary directory and loaded from there.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from cudal1.llm import LLMError, Message, SamplingParams, create_backend  # noqa: E402
from cudal1.llm.hf_backend import HFBackend  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = [
    "class ModelNew(nn.Module): def forward(self, x): return torch.relu(x)",
    "write a faster CUDA kernel for the reference program",
    "the speedup of variant one is 1.3x and of variant two 0.9x",
]


def build_tiny_model(path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|end|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|end|>", pad_token="<|pad|>", chat_template=CHAT_TEMPLATE
    )
    fast.save_pretrained(path)

    config = transformers.Qwen2Config(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        path = tmp_path_factory.mktemp("tiny-qwen2")
        build_tiny_model(path)
        yield path


@pytest.fixture
def backend(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> HFBackend:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return create_backend(f"hf:{model_dir}", device="cpu", dtype="float32")


MESSAGES = [Message("system", "you write CUDA"), Message("user", "make relu faster")]


def test_samples_tokens_and_ledger(backend: HFBackend) -> None:
    out = asyncio.run(backend.complete(MESSAGES, SamplingParams(n=3, max_tokens=8, seed=1)))
    assert len(out) == 3
    tok = backend._tokenizer
    chat = [{"role": m.role, "content": m.content} for m in MESSAGES]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|assistant|>")
    assert sum(c.prompt_tokens for c in out) == len(tok(prompt, add_special_tokens=False)["input_ids"])
    for c in out:
        assert 1 <= c.completion_tokens <= 8
        assert c.finish_reason in {"stop", "length"}
        assert c.backend == "hf" and c.model == backend.path.name and c.cost_usd is None
    summary = backend.ledger.summary()
    assert summary["calls"] == 1 and summary["samples"] == 3
    assert summary["completion_tokens"] == sum(c.completion_tokens for c in out)


def test_seed_makes_sampling_reproducible(backend: HFBackend) -> None:
    params = SamplingParams(n=2, max_tokens=6, seed=7, temperature=1.0)
    first = asyncio.run(backend.complete("hello", params))
    second = asyncio.run(backend.complete("hello", params))
    assert [c.text for c in first] == [c.text for c in second]


def test_greedy_n_copies_one_decode(backend: HFBackend) -> None:
    out = asyncio.run(backend.complete("hello", SamplingParams(n=2, max_tokens=5, temperature=0.0)))
    assert out[0].text == out[1].text and out[0].completion_tokens == out[1].completion_tokens


def test_generation_runs_off_the_event_loop_thread(backend: HFBackend, monkeypatch) -> None:
    asyncio.run(backend.complete("warm up", SamplingParams(max_tokens=1)))
    seen: list[int] = []
    generate = backend._model.generate

    def recording_generate(*args, **kwargs):
        seen.append(threading.get_ident())
        return generate(*args, **kwargs)

    monkeypatch.setattr(backend._model, "generate", recording_generate)
    asyncio.run(backend.complete("hi", SamplingParams(max_tokens=2)))
    assert seen and seen[0] != threading.get_ident()


def test_decode_finish_reasons_and_stop_strings(backend: HFBackend) -> None:
    asyncio.run(backend.complete("load", SamplingParams(max_tokens=1)))
    tok = backend._tokenizer
    ids = tok("return torch.relu(x)", add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    text, finish, used = backend._decode([*ids, eos, eos], SamplingParams(max_tokens=50))
    assert (text, finish, used) == ("return torch.relu(x)", "stop", len(ids) + 1)
    text, finish, used = backend._decode(ids, SamplingParams(max_tokens=len(ids)))
    assert finish == "length" and used == len(ids)
    text, finish, _ = backend._decode(ids, SamplingParams(max_tokens=len(ids), stop=(".relu",)))
    assert (text, finish) == ("return torch", "stop")


def test_aclose_drops_the_model_and_reloads(backend: HFBackend) -> None:
    asyncio.run(backend.complete("x", SamplingParams(max_tokens=1)))
    asyncio.run(backend.aclose())
    assert backend._model is None
    assert len(asyncio.run(backend.complete("x", SamplingParams(max_tokens=1)))) == 1


def test_unloadable_directory_is_an_llm_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.json").write_text("{}")  # looks like a model directory, holds none
    b = create_backend(f"hf:{tmp_path}", device="cpu")
    with pytest.raises(LLMError, match="cannot load model from"):
        asyncio.run(b.complete("x"))
    assert b.ledger.summary()["errors"] == 1


def test_a_directory_with_no_model_fails_when_the_backend_is_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a local model directory .*never downloaded"):
        create_backend(f"hf:{tmp_path}", device="cpu")


def save_adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter over ``base`` with random (not zero) weights, saved as a stage saves one."""
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    model = transformers.AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    torch.manual_seed(1)
    lora = peft.LoraConfig(r=4, lora_alpha=64, target_modules="all-linear", init_lora_weights=False)
    peft.get_peft_model(model, lora).save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(out)
    return out


def test_adapter_directory_loads_its_base_with_the_adapter_merged(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    adapter = save_adapter(model_dir, tmp_path / "adapter")
    assert not (adapter / "config.json").exists()  # the adapter alone: no weights of the base
    backend = create_backend(f"hf:{adapter}", device="cpu", dtype="float32")
    assert isinstance(backend, HFBackend) and backend.model_dir.base == model_dir.resolve()
    out = asyncio.run(backend.complete(MESSAGES, SamplingParams(n=2, max_tokens=4, seed=1)))
    assert len(out) == 2 and all(1 <= c.completion_tokens <= 4 for c in out)
    plain = create_backend(f"hf:{model_dir}", device="cpu", dtype="float32")
    asyncio.run(plain.complete("x", SamplingParams(max_tokens=1)))
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.inference_mode():
        adapted, base = backend._model(ids).logits, plain._model(ids).logits
    assert not torch.allclose(adapted, base)  # the adapter's weights are in the model that generates


def test_adapter_whose_base_is_missing_names_it(model_dir: Path, tmp_path: Path) -> None:
    adapter = save_adapter(model_dir, tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved-away")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"LoRA adapter over .*moved-away, which is not a local model"):
        create_backend(f"hf:{adapter}", device="cpu")
