"""Tiny offline test models (MODELS.md §2.1–2.2): a 2,048-token byte-level BPE tokenizer
trained on the Python stdlib with a project-written ChatML template, and a random
Qwen3-config causal LM (hidden 64, 2 layers). Built in ~1–2 s, cached in a folder.

Used by the unit tests (``tests/conftest.py``) and ``benchmarks/rollout.py``.
"""

from __future__ import annotations

import shutil
import sysconfig
import tempfile
from pathlib import Path

#: ChatML chat template written for the tiny tokenizer (no default system prompt, append-only).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]


def _stdlib_texts(n_files: int = 200) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:n_files]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def build_tiny_tokenizer(out_dir: str | Path, vocab_size: int = 2048):
    """Train a byte-level BPE (``vocab_size`` ids incl. 5 specials) and save it.

    Returns:
        The ``PreTrainedTokenizerFast`` (eos ``<|im_end|>``, pad ``<|endoftext|>``, no BOS,
        ChatML ``chat_template``), also saved in ``out_dir``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_stdlib_texts(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_model(out_dir: str | Path, tokenizer, *, seed: int = 0, head_dim: int = 16, max_context: int = 2048):
    """Random ``Qwen3ForCausalLM`` (hidden 64, 2 layers, 4 heads / 2 KV heads), saved with the tokenizer.

    Returns:
        The model in fp32, eval mode (≈ 0.2M params).
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = (len(tokenizer) + 63) // 64 * 64
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=max_context,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).float().eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return model


def tiny_model_dir(cache: str | Path) -> Path:
    """Build (once) the tiny tokenizer + model in ``cache/tiny-qwen3-bpe2k`` and return the folder."""
    out = Path(cache) / "tiny-qwen3-bpe2k"
    if not (out / "config.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="tiny-", dir=str(Path(cache).mkdir(parents=True, exist_ok=True) or cache)))
        tok = build_tiny_tokenizer(tmp)
        build_tiny_model(tmp, tok)
        try:
            tmp.rename(out)  # atomic: concurrent builders race safely, the loser's copy is dropped
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
