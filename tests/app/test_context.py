"""The context meter and the overflow policy: what the model sees is counted off the GUI thread, a chat
longer than the context leaves out its earliest turns (or is refused with a way out), never broken."""

from pathlib import Path

import pytest

from app.context_fit import DROP_OLDEST, KEEP_SYSTEM, REFUSE, fit_messages, longest_context, reply_room
from app.state.settings import Settings
from app.workers import _ram_probe
from runtime.chat_format import ChatFormat
from runtime.options import CONTEXT, CONTEXT_OVERFLOW
from tests.app_support import make_window

DEMO = Path(__file__).resolve().parents[2] / "assets" / "demo"
CHAT = [{"role": "system", "content": "S" * 10},
        {"role": "user", "content": "a" * 10}, {"role": "assistant", "content": "b" * 10},
        {"role": "user", "content": "c" * 10}, {"role": "assistant", "content": "d" * 10},
        {"role": "user", "content": "e" * 10}]


def chars(messages):
    return sum(len(m["content"]) for m in messages)


def test_a_chat_that_fits_is_sent_whole():
    fit = fit_messages(CHAT, chars, 60, KEEP_SYSTEM)
    assert fit.fits and fit.dropped == 0 and fit.tokens == 60 and list(fit.messages) == CHAT


def test_keep_system_leaves_out_the_earliest_whole_turns():
    fit = fit_messages(CHAT, chars, 45, KEEP_SYSTEM)
    assert fit.fits and fit.dropped == 2 and fit.tokens == 40
    assert [m["content"][0] for m in fit.messages] == ["S", "c", "d", "e"]


def test_drop_oldest_leaves_out_the_system_prompt_first():
    fit = fit_messages(CHAT, chars, 50, DROP_OLDEST)
    assert fit.fits and [m["content"][0] for m in fit.messages] == ["a", "b", "c", "d", "e"]


def test_refuse_leaves_out_nothing():
    fit = fit_messages(CHAT, chars, 45, REFUSE)
    assert not fit.fits and fit.dropped == 0 and fit.tokens == 60


def test_a_newest_turn_longer_than_the_context_does_not_fit_under_any_policy():
    for policy in (KEEP_SYSTEM, DROP_OLDEST):
        fit = fit_messages(CHAT, chars, 9, policy)
        assert not fit.fits and fit.messages[-1]["content"] == "e" * 10


def test_the_count_is_the_rendered_template_of_the_demo():
    chat = ChatFormat(DEMO)

    def count(messages):
        return len(chat.prompt_ids(messages, enable_thinking=False))

    whole = count(CHAT)
    assert whole > chars(CHAT) // 10  # the template's own tokens are counted, not only the text
    fit = fit_messages(CHAT, count, whole - 1, KEEP_SYSTEM)
    assert fit.fits and fit.dropped == 2 and fit.tokens == count(list(fit.messages)) < whole


def test_the_reply_keeps_its_room():
    assert reply_room(8192, 1024) == 1024 and reply_room(1024, 1024) == 256 and reply_room(2, 1) == 1


def test_the_context_ceiling_comes_from_the_memory_plan():
    probe = _ram_probe()
    assert longest_context(DEMO, probe, "1.5M", on_cpu=True) == CONTEXT.high  # the demo's cache is tiny
    tiny = type(probe)((), probe.ram_total_bytes, 600 * 2**20, 0, "test")  # 600 MiB: the workspace and a little
    ceiling = longest_context(DEMO, tiny, "1.5M", on_cpu=True)
    assert CONTEXT.low < ceiling < CONTEXT.high and ceiling % 1024 == 0


def test_the_overflow_policy_is_a_registered_setting(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"context_overflow": "sometimes"}')
    s = Settings.load(path)
    assert s.context_overflow == CONTEXT_OVERFLOW.default and "context_overflow" in s.problem
    path.write_text('{"context_overflow": "refuse"}')
    assert Settings.load(path).context_overflow == "refuse"


@pytest.fixture
def short_window(qtbot, tmp_path):
    """The demo with a 192-token context: a few turns fill it."""
    return make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16, context=192,
                                                          context_overflow="refuse"))


def test_the_meter_counts_the_draft_off_the_gui_thread(qtbot, short_window):
    w = short_window
    qtbot.waitUntil(lambda: w.meter.tokens == 0, timeout=30000)  # an empty chat: nothing to send yet
    with qtbot.waitSignal(w.controller.sig_context, timeout=30000):
        w.input.setPlainText("What is 2 + 3? " * 5)
    assert w.meter.tokens > 20 and w.meter.context == 192 and "/ 192 tokens" in w.meter.label.text()


def test_a_message_longer_than_the_context_is_refused_with_a_way_out(qtbot, short_window):
    w, c = short_window, short_window.controller
    text = "word " * 300
    w.input.setPlainText(text)
    with qtbot.waitSignal(c.sig_overflow, timeout=60000) as refused:
        w.send()
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=60000)
    assert "Nothing was sent" in refused.args[0] and "Take it back" in refused.args[0]
    assert w.notes.take_back.isVisible() and not w.notes.leave_out.isVisible()  # its one turn cannot be left out
    assert [m.role for m in c.history.messages(c.chats.current)] == ["user"]  # no empty reply left behind
    w.notes.take_back.click()
    assert c.history.messages(c.chats.current) == [] and w.input.toPlainText() == text.strip()
    w.input.setPlainText("What is 2 + 3?")  # the chat is not broken: a short message is answered
    with qtbot.waitSignal(c.sig_reply_done, timeout=120000) as done:
        w.send()
    assert done.args[1].meta["finish_reason"] in ("end_of_turn", "length") and done.args[1].meta["prompt_tokens"] > 0


def test_a_long_chat_leaves_out_its_earliest_turns(qtbot, short_window):
    w, c = short_window, short_window.controller
    w.settings.context_overflow = KEEP_SYSTEM
    for i in range(4):  # earlier turns of about 40 tokens each
        c.history.add_message(c.chats.current, "user", f"question {i} " + "x " * 30)
        c.history.add_message(c.chats.current, "assistant", f"answer {i}")
    c.chats.select(c.chats.current)
    w.input.setPlainText("What is 2 + 3?")
    with qtbot.waitSignal(c.sig_reply_done, timeout=120000) as done:
        w.send()
    meta = done.args[1].meta
    assert meta["context_dropped"] >= 2 and meta["context_dropped"] % 2 == 0  # whole turns
    assert meta["prompt_tokens"] <= c.context.limits()[0]
    assert "left out" in w.notes.error.text()  # the user is told, and where to change it


def test_the_context_ceiling_with_experts_in_ram_counts_what_the_gpu_holds(tmp_path):
    """Loaded with its routed experts in RAM, the parent's context ceiling comes from what that placement
    puts on the GPU (the plain parent would not fit even the shortest context)."""
    from runtime.cache import cache_bytes
    from runtime.store.hardware import GpuInfo, HardwareProbe
    from runtime.store.planner import WORKSPACE_BYTES, checkpoint_sizing, plan_checkpoint
    from tools.real_layout import Options, generate

    folder = generate(tmp_path / "nvfp4", Options("nvfp4", "tiny", experts=64))  # experts outweigh the cache
    cfg, subs, _, _ = checkpoint_sizing(folder)
    roomy = HardwareProbe((GpuInfo(0, "test", (8, 9), 1 << 40, 1 << 40, 0, "t"),), 1 << 36, 1 << 35, 1 << 40)
    placed = plan_checkpoint(folder, roomy, 16, "all").proposed()
    plain = plan_checkpoint(folder, roomy, 16).submodels[0]
    target = 2048
    free = placed.device_bytes + WORKSPACE_BYTES + cache_bytes(cfg, subs[0], target, 2)
    assert plain.weight_bytes + plain.cache_bytes + WORKSPACE_BYTES > free  # the plain parent: not even 16 tokens
    gpu = GpuInfo(0, "test", (8, 9), free, free, 0, "t")
    probe = HardwareProbe((gpu,), 1 << 36, 1 << 35, 1 << 40)
    assert longest_context(folder, probe, "30B", on_cpu=False) == CONTEXT.low
    assert longest_context(folder, probe, "30B", on_cpu=False, placement="all") == target


def _refused(qtbot, w, text: str) -> None:
    c = w.controller
    w.input.setPlainText(text)
    with qtbot.waitSignal(c.sig_overflow, timeout=60000):
        w.send()
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=60000)


@pytest.mark.parametrize("earlier_turns", [0, 4])
def test_a_refused_message_shows_as_not_sent_and_no_later_reply_reads_it(qtbot, short_window, earlier_turns):
    w, c = short_window, short_window.controller
    cid = c.chats.current
    for i in range(earlier_turns):  # with earlier turns, leaving them out would let it fit
        c.history.add_message(cid, "user", f"question {i} " + "x " * 30)
        c.history.add_message(cid, "assistant", f"answer {i}")
    c.chats.select(cid)
    long = "word " * (300 if not earlier_turns else 60)
    _refused(qtbot, w, long)
    shown = w.chat.widgets[-1]
    assert shown.role == "user" and shown.info.text().startswith("not sent: too long for the context")
    saved = c.history.messages(cid)[-1]
    assert saved.meta["not_sent"] and not saved.complete  # kept to take back, or to send leaving turns out
    assert long.strip() not in [m["content"] for m in c.chats.chat_messages(cid)]  # no reply reads it as a turn
    if earlier_turns:  # sent after all, leaving the earliest turns out: now it is a turn
        with qtbot.waitSignal(c.sig_reply_done, timeout=120000):
            w.notes.leave_out.click()
        question = [m for m in c.history.messages(cid) if m.role == "user"][-1]
        assert question.complete and "not_sent" not in question.meta
        assert not [x for x in w.chat.widgets if x.role == "user" and x.info.text().startswith("not sent")]
    else:  # another message instead: answered without the refused one in its prompt
        w.input.setPlainText("What is 2 + 3?")
        with qtbot.waitSignal(c.sig_reply_done, timeout=120000) as done:
            w.send()
        assert done.args[1].meta["finish_reason"] in ("end_of_turn", "length")
        assert long.strip() not in [m["content"] for m in c.chats.chat_messages(cid)]
