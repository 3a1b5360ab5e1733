"""A tool's result becomes text in time linear in its size (issue 37, item 7): 40,000 empty content
blocks (about 1 MB) took 50 s against an 8 s timeout, in the reply's thread where Stop cannot act,
because each block summed the lengths of all the text kept before it."""

from types import SimpleNamespace

import pytest

from runtime.mcp import client
from runtime.mcp.client import MAX_RESULT_BLOCKS, _result_text


class Counted(str):
    """Text that counts how often its length is asked: the work the conversion does per block."""

    asked = 0

    def __len__(self):
        Counted.asked += 1
        return super().__len__()


def text_block(text: str):
    return SimpleNamespace(type="text", text=Counted(text))


SHAPES = {
    "40,000 empty blocks": [""] * 40_000,
    "100,000 one-character blocks": ["x"] * 100_000,
    "5,000 blocks of 100 characters": ["y" * 100] * 5_000,
    "a few long blocks, then many empty": ["z" * 20_000] * 3 + [""] * 30_000,
    "600 blocks of 10 characters (under both bounds)": ["w" * 10] * 600,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_result_of_many_blocks_costs_work_linear_in_the_blocks_read(shape):
    texts = SHAPES[shape]
    Counted.asked = 0
    text, cut = _result_text(SimpleNamespace(content=[text_block(t) for t in texts]), 16_000)
    read = min(len(texts), MAX_RESULT_BLOCKS)
    assert Counted.asked <= 4 * read  # a constant per block read, never the text kept so far
    assert len(text) <= 16_000 + 200
    if len(texts) > MAX_RESULT_BLOCKS:
        assert cut and text.endswith(f"[cut: the tool returned {len(texts):,} content blocks; the first "
                                     f"{MAX_RESULT_BLOCKS:,} are read]")
    whole = "\n".join(texts[:read])
    assert text.startswith(whole[:16_000])
    assert cut == (len(texts) > MAX_RESULT_BLOCKS or len(whole) > 16_000)


def test_blocks_of_every_kind_are_named_within_the_bounds():
    kinds = [SimpleNamespace(type="image", mime_type="image/png"),
             SimpleNamespace(type="resource_link", uri="file:///a\nb"),
             SimpleNamespace(type="resource", resource=SimpleNamespace(text=None, uri="file:///c")),
             SimpleNamespace(type="text", text=None)] * 20_000
    text, cut = _result_text(SimpleNamespace(content=kinds), client.MAX_RESULT_CHARS)
    assert cut and text.startswith("[image content (image/png), not shown]\n[a link to file:///a / b]")
    assert len(text) <= client.MAX_RESULT_CHARS + 200
