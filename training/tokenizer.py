"""A small byte-level BPE tokenizer with ChatML and thinking tokens, in the hub layout.

Used for the test checkpoints and the bundled demo model. The chat template follows
Nemotron 3's (see CHAT_TEMPLATE): the assistant turn opens with `<think>\n` when thinking is on and
with `<think></think>` when it is off; reasoning before the last user message is dropped unless
`truncate_history_thinking` is false; tools, tool calls and tool results are rendered as the real
template renders them, with `<tool_call>`, `</tool_call>`, `<tool_response>` and `</tool_response>`
as single (non-special) tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Tool-call markers: single tokens, as in the real Nemotron 3 vocabulary, but not "special", so that
# decoding (which skips special tokens) keeps them in the reply text a tool-call parser reads.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# The instruction the real template puts after the tool list (Qwen3-Coder's, which Nemotron 3 follows).
TOOL_INSTRUCTIONS = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n</IMPORTANT>"
)

# Nemotron 3's template, rendered the same way for what the demo is given: an empty system block
# when there is no system message; tools in the system turn ("# Tools", <tools>, the instruction);
# an assistant's reasoning kept only after the last user message (so inside a tool loop) unless
# truncate_history_thinking is false; assistant tool_calls as <tool_call> blocks from arguments
# given as an object (a string raises, as the real template does); consecutive tool results merged
# into one user turn of <tool_response> blocks, with no call id; a system (or developer) message
# after the first turn as a system turn where it stands (the first one opens the prompt).
CHAT_TEMPLATE = r"""{%- macro extra_keys(d, handled) -%}
{%- if d is mapping -%}{%- for k in d if k not in handled -%}
{%- if d[k] is mapping or (d[k] is sequence and d[k] is not string) -%}{{- '\n<' ~ k ~ '>' ~ (d[k] | tojson) ~ '</' ~ k ~ '>' -}}
{%- else -%}{{- '\n<' ~ k ~ '>' ~ (d[k] | string) ~ '</' ~ k ~ '>' -}}{%- endif -%}
{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- set thinking = enable_thinking if enable_thinking is defined else true -%}
{%- set truncate = truncate_history_thinking if truncate_history_thinking is defined else true -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}
{{- '<|im_start|>system\n' ~ system -}}
{%- if tools is defined and tools -%}
{%- if system -%}{{- '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou have access to the following functions:\n\n<tools>' -}}
{%- for tool in tools -%}
{%- set f = tool['function'] if tool['function'] is defined else tool -%}
{{- '\n<function>\n<name>' ~ f['name'] ~ '</name>' -}}
{%- if f['description'] is defined and f['description'] -%}{{- '\n<description>' ~ (f['description'] | trim) ~ '</description>' -}}{%- endif -%}
{{- '\n<parameters>' -}}
{%- set params = f['parameters'] if f['parameters'] is defined and f['parameters'] is mapping else {} -%}
{%- if params['properties'] is defined and params['properties'] is mapping -%}
{%- for name, p in params['properties'] | items -%}
{{- '\n<parameter>\n<name>' ~ name ~ '</name>' -}}
{%- if p['type'] is defined -%}{{- '\n<type>' ~ (p['type'] | string) ~ '</type>' -}}{%- endif -%}
{%- if p['description'] is defined -%}{{- '\n<description>' ~ (p['description'] | trim) ~ '</description>' -}}{%- endif -%}
{%- if p['enum'] is defined -%}{{- '\n<enum>' ~ (p['enum'] | tojson) ~ '</enum>' -}}{%- endif -%}
{{- extra_keys(p, ['name', 'type', 'description', 'enum']) -}}
{{- '\n</parameter>' -}}
{%- endfor -%}
{%- endif -%}
{{- extra_keys(params, ['type', 'properties', 'required']) -}}
{%- if params['required'] is defined -%}{{- '\n<required>' ~ (params['required'] | tojson) ~ '</required>' -}}{%- endif -%}
{{- '\n</parameters>' -}}
{{- extra_keys(f, ['type', 'name', 'description', 'parameters']) -}}
{{- '\n</function>' -}}
{%- endfor -%}
{{- '\n</tools>' -}}
{{- 'TOOL_INSTRUCTIONS' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for m in messages -%}
{%- set role = m['role'] -%}
{%- if role == 'system' -%}
{%- if not loop.first -%}{{- '<|im_start|>system\n' ~ m['content'] ~ '<|im_end|>\n' -}}{%- endif -%}
{%- elif role == 'user' -%}
{{- '<|im_start|>user\n' ~ m['content'] ~ '<|im_end|>\n' -}}
{%- elif role == 'assistant' -%}
{%- set reasoning = m['reasoning_content'] if m['reasoning_content'] is string else '' -%}
{%- set content = m['content'] if m['content'] is string else '' -%}
{%- set keep = not truncate or loop.index0 > ns.last_user -%}
{%- set calls = m['tool_calls'] if m['tool_calls'] is defined and m['tool_calls'] else [] -%}
{%- if reasoning.strip() and keep -%}{%- set body = ('<think>\n' ~ reasoning ~ '\n</think>\n' ~ content) | trim -%}
{%- elif calls -%}{%- set body = '<think></think>' ~ (content | trim) -%}
{%- else -%}{%- set body = ('<think></think>' ~ content) | trim -%}{%- endif -%}
{{- '<|im_start|>assistant\n' ~ body -}}
{%- if calls -%}
{{- '\n' -}}
{%- for call in calls -%}
{%- set c = call['function'] if call['function'] is defined else call -%}
{%- if c['arguments'] is not mapping -%}{{- raise_exception('tool call arguments must be an object, not a JSON string') -}}{%- endif -%}
{{- '<tool_call>\n<function=' ~ c['name'] ~ '>\n' -}}
{%- for k, v in c['arguments'] | items -%}
{{- '<parameter=' ~ k ~ '>\n' -}}
{%- if v is mapping or (v is sequence and v is not string) -%}{{- v | tojson -}}{%- else -%}{{- v | string -}}{%- endif -%}
{{- '\n</parameter>\n' -}}
{%- endfor -%}
{{- '</function>\n</tool_call>\n' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- elif role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user\n' -}}{%- endif -%}
{{- '<tool_response>\n' ~ m['content'] ~ '\n</tool_response>\n' -}}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' ~ ('<think>\n' if thinking else '<think></think>') -}}
{%- endif -%}""".replace("TOOL_INSTRUCTIONS", TOOL_INSTRUCTIONS.replace("\n", "\\n"))


def build_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: Path) -> Tokenizer:
    """Trains a byte-level BPE on `corpus` and writes tokenizer.json and tokenizer_config.json."""
    tok = Tokenizer(models.BPE())
    # Digits stay single tokens, so numbers are spelled digit by digit (arithmetic needs that).
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + TOOL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The trainer makes every added token special; the tool markers must not be (see TOOL_TOKENS).
    data = json.loads(tok.to_str())
    for added in data["added_tokens"]:
        if added["content"] in TOOL_TOKENS:
            added["special"] = False
    (out_dir / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "<unk>",
        "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return tok
