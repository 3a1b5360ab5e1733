"""The window as a daily driver: the model picker (load, unload, what is resident), system-prompt presets,
drafts per chat, banners that close, long words that wrap, copy buttons that answer."""

import json

import pytest
from PySide6.QtGui import QGuiApplication

from app.markdown_blocks import ZWSP, breakable
from app.state.presets import BUILT_IN, check_preset, load_presets, save_presets
from app.state.settings import Settings
from app.widgets.chat_view import MessageWidget
from tests.app_support import ask, make_window


def test_long_runs_get_break_points_but_markup_and_words_stay_whole():
    word = "x" * 40
    assert breakable(word) == ZWSP.join(["x" * 16, "x" * 16, "x" * 8]) and breakable("short words") == "short words"
    link = "[a](https://example.com/a/very/long/path/that/goes/on/and/on)"
    assert breakable(link, markdown=True) == link and ZWSP in breakable(link)  # plain text: any run breaks


def test_a_long_word_wraps_and_never_widens_the_message(qtbot):
    w = MessageWidget(1, "assistant", "word " + "y" * 400 + " end", meta={"answer_submodel": "1.5M"})
    qtbot.addWidget(w)
    w.resize(400, 300)
    w.show()
    assert w.minimumSizeHint().width() < 400


def test_copy_buttons_say_copied(qtbot):
    w = MessageWidget(1, "assistant", "the answer", meta={})
    qtbot.addWidget(w)
    w.buttons["Copy"].click()
    assert QGuiApplication.clipboard().text() == "the answer" and w.buttons["Copy"].text() == "Copied ✓"
    qtbot.waitUntil(lambda: w.buttons["Copy"].text() == "Copy", timeout=5000)


def test_presets_file_is_checked(tmp_path):
    assert load_presets(tmp_path) == ({}, "")
    assert save_presets(tmp_path, {"Mine": "Be kind."}) == ""
    assert load_presets(tmp_path) == ({"Mine": "Be kind."}, "")
    (tmp_path / "prompt_presets.json").write_text(json.dumps({"ok": "fine", "Brief": "shadows a built-in", "n": 3}))
    presets, note = load_presets(tmp_path)
    assert presets == {"ok": "fine"} and "2 entries" in note
    (tmp_path / "prompt_presets.json").write_text("[not an object")
    assert load_presets(tmp_path)[0] == {} and "could not be read" in load_presets(tmp_path)[1]
    assert check_preset(" ", "x") and check_preset("Brief", "x") and not check_preset("New", "x")


def test_the_picker_presets_drafts_and_banners_in_one_window(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    c = w.controller
    # the picker: the demo is listed and loaded, with its submodels in memory
    qtbot.waitUntil(lambda: bool(w.picker.rows), timeout=60000)
    assert w.picker.combo.currentData() and w.picker.resident.text() == "in memory: " + ", ".join(w.loaded.loaded)
    with qtbot.waitSignal(c.sig_model_unloaded, timeout=30000):
        w.picker.unload.click()
    qtbot.waitUntil(lambda: c.worker.engine is None, timeout=60000)  # the memory is really freed
    assert not w.send_button.isEnabled() and w.picker.resident.text() == "none loaded" and c.loaded is None
    with qtbot.waitSignal(c.sig_model_loaded, timeout=180000):
        w.picker.combo.activated.emit(w.picker.combo.findData(w.picker.rows[0].key))
    assert w.send_button.isEnabled() and w.picker.unload.isEnabled()
    # presets: choosing one sets the chat's system prompt; the chat's own prompt can be saved as one
    w.prompts.combo.activated.emit(w.prompts.combo.findData("Brief"))
    assert c.chats.settings()[0] == BUILT_IN["Brief"] and w.prompts.combo.currentData() == "Brief"
    c.chats.set_system_prompt("Answer in French.")
    monkeypatch.setattr("PySide6.QtWidgets.QInputDialog.getText", lambda *a, **k: ("French", True))
    w.dialogs.save_preset()
    assert load_presets(w.data_dir)[0] == {"French": "Answer in French."} and w.prompts.combo.currentData() == "French"
    # drafts belong to their chat
    ask(qtbot, w, "hello", "Off")
    first = c.chats.current
    w.input.setPlainText("a draft for the first chat")
    w.new_chat()
    second = c.chats.current
    assert second != first and w.input.toPlainText() == ""
    w.input.setPlainText("the second chat's draft")
    c.chats.select(first)
    assert w.input.toPlainText() == "a draft for the first chat"
    ask(qtbot, w, "What is 2 + 3?", "Off")  # sending takes this chat's draft; the other chat's stays
    assert w.input.toPlainText() == ""
    c.chats.select(second)
    assert w.input.toPlainText() == "the second chat's draft"
    # banners close, and the error line's offers go with it
    w.notes.show_error("Something to read.", lower="Quick")
    assert w.notes.error.isVisible() and w.notes.lower_depth.isVisible()
    w.notes.error.close_button.click()
    assert not w.notes.error.isVisible() and not w.notes.lower_depth.isVisible()
    assert w.banner.isVisible()  # the demo's banner
    w.banner.close_button.click()
    assert not w.banner.isVisible()
    w.close()


def test_opening_a_chat_shows_its_latest_message_even_after_earlier_ones_were_shown(qtbot):
    from app.state.history import Message
    from app.widgets.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()

    def chat(cid, n):
        return [Message(cid * 1000 + i, cid, "user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * 30)
                for i in range(n)]
    view.show_chat(1, chat(1, 60), None)
    view.show_earlier()  # reading back in a long chat
    view.show_chat(2, chat(2, 20), None)
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=5000)
    bar.setValue(0)  # the user scrolls up to read: a reply growing below does not pull the view down
    last = chat(2, 20)[-1]
    view.finish(2, Message(last.id, 2, "assistant", last.content + " more" * 400))
    qtbot.wait(50)
    assert bar.value() == 0
    bar.setValue(bar.maximum())  # back at the end: it follows again
    view.finish(2, Message(last.id, 2, "assistant", last.content + " more" * 800))
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5000)


@pytest.mark.parametrize("n", [6, 40])
def test_the_end_of_a_chat_is_its_last_message_with_no_blank_below(qtbot, n):
    """There was one, growing with the chat: the column took its layout's minimum height, the sum of
    every wrapped text's height at its narrowest, rather than its height at the width it has."""
    from app.state.history import Message
    from app.widgets.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 320)
    view.show()
    messages = [Message(i, 1, "user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * (3 + 7 * (i % 5)),
                        meta={} if i % 2 == 0 else {"answer_submodel": "1.5M", "tokens_per_s": 40.0})
                for i in range(n)]
    view.show_chat(1, messages, None)
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=5000)
    for width in (700, 420, 900):
        view.resize(width, 320)
        qtbot.wait(20)
        bar.setValue(bar.maximum())
        last = view.widgets[-1]
        below = view.widget().height() - last.geometry().bottom() - 1
        assert below <= view.column.contentsMargins().bottom() + 1, below


def test_the_load_line_never_widens_the_window(qtbot):
    """It did: at font 20 its line asked for 1,199 px, and the window grew past a 1280 px screen while a
    model loaded (and stayed that wide)."""
    from app.widgets.load_progress import LoadProgress

    w = LoadProgress()
    qtbot.addWidget(w)
    w.start("star-elastic-30b-nvfp4")
    w.text.setText("star-elastic-30b-nvfp4: loading 3.0 of 16.8 GiB (18%), shard 1 of 5, about 55 s left " * 2)
    assert w.minimumSizeHint().width() < 500 and "about 55 s left" in w.text.text()


def test_esc_and_a_send_elsewhere_leave_another_chats_reply_running(qtbot, tmp_path, gate):
    from PySide6.QtCore import Qt

    from tests.app_support import LONG, hold

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=40))
    c = w.controller
    reply, controls = hold(qtbot, w, gate, "Balanced", at=3)  # chat A's reply, held mid-thought
    first = c.chats.current
    w.new_chat()
    qtbot.keyClick(w, Qt.Key.Key_Escape)  # Esc in chat B: B has no reply, A's goes on
    assert not controls.stop_requested and not w.stop_button.isEnabled()
    gate.at = None
    w.input.setPlainText("What is 2 + 3?")
    w.send()  # B's reply waits its turn behind A's
    assert not controls.stop_requested and "starts when the one in" in w.notes.error.text()
    waiting = w.chat.widgets[-1]
    assert waiting.tail.text().startswith("Waiting for the reply in “") and w.stop_button.isEnabled()
    assert w.strip.badge.text().endswith("waiting") and not w.answer_now_button.isEnabled()
    done = {}
    c.sig_reply_done.connect(lambda cid, m: done.__setitem__(cid, m.meta["finish_reason"]))
    controls.released.set()
    qtbot.waitUntil(lambda: len(done) == 2, timeout=LONG)
    assert done[first] != "stopped" and done[c.chats.current] != "stopped"
    w.close()
