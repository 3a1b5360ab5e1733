"""One validation of a checkpoint folder, shared by loading and `models verify`.

`inspect_checkpoint` reads every file of a checkpoint as data, never its tensor bytes, and checks
it in a fixed order, each step trusting only what the steps before it established:

1. config.json: JSON, types and ranges of every field, and the model's size by arithmetic
   (config.py);
2. the quantization config: hf_quant_config.json or quantization_config (quant.py);
3. elastic.json: the nested widths against the parent (checkpoint/submodels.py);
4. the weight files: the shard index (plain file names in this folder) and every safetensors
   header (safetensors_io.py);
5. the tensors against the config: counts and bytes by arithmetic first, then names, shapes,
   dtypes and packed layouts, and that every submodel can be sliced from them (weights.py).

`ElasticModel.load` calls `inspect_checkpoint`; `check_checkpoint` adds what a chat needs
(the tokenizer files and the chat template, as the engine loads them), so a folder that verifies
is a folder that loads. Every failure is a `CheckpointError`: one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..chat_format import check_tokenizer_files, template_text
from ..chat_template import compile_template
from ..errors import CheckpointError, one_line
from .config import ModelConfig, read_json
from .quant import QuantSpec, read_quant_spec
from .safetensors_io import TensorInfo, tensor_table
from .submodels import Submodel, load_elastic
from .weights import check_nesting, check_tensor_table


@dataclass(frozen=True)
class CheckedCheckpoint:
    """What a checked folder holds, for the loader to use without reading anything twice."""

    folder: Path
    raw_config: dict
    config: ModelConfig
    quant: QuantSpec | None
    submodels: tuple[Submodel, ...]  # parent first
    table: dict[str, TensorInfo]  # canonical tensor name -> where and how it is stored


def read_model_files(folder, elastic: dict | None = None):
    """The folder's config.json (raw and parsed), its quantization and its submodels (parent first),
    each checked: the one reading of these three files for the loader, the store and decode-check.

    Args:
        elastic: an `elastic.json` object to use instead of the folder's (the catalog's); the
            folder's own file is still checked when it exists.
    Returns:
        (raw config, ModelConfig, QuantSpec or None, list of Submodel)
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(folder, "not a folder")
    raw = read_json(folder / "config.json")
    cfg = ModelConfig.from_dict(raw, folder / "config.json")
    quant = read_quant_spec(folder, raw)
    subs = load_elastic(folder, cfg)
    if elastic is not None:
        subs = load_elastic(folder, cfg, elastic)
    return raw, cfg, quant, subs


def inspect_checkpoint(folder, elastic: dict | None = None) -> CheckedCheckpoint:
    """Checks the model files of `folder` (config, quantization, elastic table, weights).

    Args:
        elastic: an `elastic.json` object to use instead of the folder's (the catalog's); the
            folder's own file is still checked when it exists.
    Raises:
        CheckpointError naming the file and the problem.
    """
    folder = Path(folder)
    raw, cfg, quant, subs = read_model_files(folder, elastic)
    table = check_tensor_table(cfg, tensor_table(folder), folder, quant)
    check_nesting(cfg, subs, table, quant)
    return CheckedCheckpoint(folder, raw, cfg, quant, tuple(subs), table)


def check_checkpoint(folder, elastic: dict | None = None) -> None:
    """Runs exactly the checks loading a checkpoint for chat runs, without reading tensor data:
    the model files (`inspect_checkpoint`), then the tokenizer files and the chat template.

    Raises:
        CheckpointError naming the file and the problem (one line).
    """
    checked = inspect_checkpoint(folder, elastic)
    check_chat_files(checked.folder)


def check_chat_files(folder: Path) -> None:
    """The tokenizer and chat template as the engine loads them: the files' types, tokenizer.json
    parsed by the tokenizers library, and the template compiled in the sandbox."""
    folder = Path(folder)
    config = check_tokenizer_files(folder)
    from tokenizers import Tokenizer  # fast import; transformers is not needed here

    try:
        Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as e:  # the Rust parser's message is all it says
        raise CheckpointError(folder / "tokenizer.json",
                              f"cannot be read as a tokenizer ({one_line(e)[:200]})") from None
    source, where = template_text(folder, config)
    if source is not None:
        compile_template(source, str(where))
