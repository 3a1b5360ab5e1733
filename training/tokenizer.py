"""A small byte-level BPE tokenizer with ChatML and thinking tokens, in the hub layout.

Used for the test checkpoints and the bundled demo model. The chat template follows
Nemotron 3's conventions: the assistant turn opens with `<think>\n` when thinking is on and
with `<think></think>` when it is off; past turns keep their reasoning only when
`truncate_history_thinking` is false.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

CHAT_TEMPLATE = (
    "{%- set thinking = enable_thinking if enable_thinking is defined else true -%}"
    "{%- set truncate = truncate_history_thinking if truncate_history_thinking is defined else true -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- set reasoning = message.get('reasoning_content') or '' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if reasoning and not truncate -%}"
    "{{- '<think>\\n' + reasoning.strip() + '\\n</think>\\n' -}}"
    "{%- else -%}"
    "{{- '<think></think>' -}}"
    "{%- endif -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{{- '<think>\\n' if thinking else '<think></think>' -}}"
    "{%- endif -%}"
)


def build_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: Path) -> Tokenizer:
    """Trains a byte-level BPE on `corpus` and writes tokenizer.json and tokenizer_config.json."""
    tok = Tokenizer(models.BPE())
    # Digits stay single tokens, so numbers are spelled digit by digit (arithmetic needs that).
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "<unk>",
        "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return tok
