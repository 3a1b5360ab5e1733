"""Takes the README's screenshots of the real windows at 1280x720 (run under Xvfb, or any desktop):

    xvfb-run -a -s "-screen 0 1280x720x24" python tools/screenshots.py [--out docs/screenshots]

1. a reply mid-stream, light and dark: thinking block live, the live strip showing the thinking submodel
2. the finished reply (thinking collapsed to its summary), light and dark
3. a thought steered in flight: the slider moved from Quick to Balanced while 0.5M thought, so 1.0M
   thinks on (the strip notes the switch and its cost; Answer now and Think longer are enabled)
(the model manager's: tools/screenshots_model_manager.py)

The model is never slowed: the mid-stream moment is caught by grabbing the window while the worker keeps
generating, so every number in the pictures (tokens/s, time to first token) is what this PC measured. If
the moment is missed (a very fast PC), the model is slowed for one more try and the live strip's speed
says so instead of showing a slowed tokens/s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SIZE = (1280, 720)

from tools import screenshot_kit as kit  # noqa: E402 (after the path)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    args, work = kit.start(ROOT / "docs" / "screenshots")

    from PySide6.QtWidgets import QApplication

    import runtime.model as rm
    from app.main_window import MainWindow
    from app.state.settings import Settings
    from app.theme import apply_theme

    app = QApplication([])

    def wait(cond, seconds=900):  # a busy shared CPU can take minutes per reply
        return kit.wait(app, cond, seconds)

    def shoot(widget, name):
        kit.shoot(app, widget, args.out / name)

    def thinking_shown():
        c = w.controller
        r = c.replies.reply_in(c.chats.current)
        live = w.chat.widgets[-1] if w.chat.widgets else None
        return (r is not None and r.phase == "thinking" and r.progress.thinking_tokens >= 8
                and live is not None and live.thinking.body.text().strip() != "")

    def slowed():
        """Slows the model for one more try when a moment was missed (a very fast PC); returns the undo."""
        slow = rm.ElasticModel.forward
        rm.ElasticModel.forward = lambda *a, **k: (time.sleep(0.05), slow(*a, **k))[1]

        def undo():
            rm.ElasticModel.forward = slow
        return undo

    def steered(question, name):
        """Grabs the window after the slider moved mid-thought, while the new thinker goes on."""
        for attempt in range(2):
            undo = slowed() if attempt else (lambda: None)
            w.controller.set_depth("Quick")
            w.input.setPlainText(question)
            w.send()
            w.controller.chats.rename(w.controller.chats.current, "Demo: a thought steered")
            r = w.controller.replies.reply_in(w.controller.chats.current)
            wait(lambda: r.progress.thinking_tokens >= 8 or not w.controller.replies.busy)
            w.depth.jump(2)  # Balanced: its thinker takes over from the next token
            moved_on = wait(lambda: (r.submodel != "0.5M" and r.progress.thinking_tokens >= 16)
                            or not w.controller.replies.busy)
            caught = moved_on and r.phase == "thinking" and w.controller.replies.busy
            if caught:
                if attempt:
                    w.strip.speed.setText("tok/s: slowed for this picture")
                shoot(w, name)
            wait(lambda: not w.controller.replies.busy)
            undo()
            if caught:
                print(f"{name}: {'caught at full speed' if not attempt else 'model slowed; speed not shown'}")
                return
        print(f"{name}: missed")

    def mid_reply(question, name):
        """Grabs the window while the reply thinks; slows the model only if that moment was missed."""
        w.input.setPlainText(question)
        w.send()
        caught = wait(lambda: thinking_shown() or not w.controller.replies.busy) and w.controller.replies.busy
        if not caught:
            slow = rm.ElasticModel.forward
            rm.ElasticModel.forward = lambda *a, **k: (time.sleep(0.05), slow(*a, **k))[1]
            w.input.setPlainText(question)
            w.send()
            wait(lambda: thinking_shown() or not w.controller.replies.busy)
            w.strip.speed.setText("tok/s: slowed for this picture")
            rm.ElasticModel.forward = slow
        shoot(w, name)
        wait(lambda: not w.controller.replies.busy)
        print(f"{name}: {'caught at full speed' if caught else 'model slowed; speed not shown'}")

    apply_theme(app, "light", 11)
    data = work / "data"
    w = MainWindow(data, Settings(max_new_tokens=300), data / "settings.json")
    w.resize(*SIZE)
    w.show()
    wait(lambda: w.loaded is not None)
    wait(lambda: False, 8)  # the warm-up after loading
    w.controller.history.rename(w.controller.chats.current, "Demo: sums")
    w.controller.set_depth("Balanced")  # a smaller submodel thinks, the parent answers
    mid_reply("What is 45 + 23 - 17 + 9?", "reply-mid-stream.png")
    shoot(w, "reply-finished.png")  # the same sum answered, its thinking collapsed to a summary
    w.new_chat()
    steered("What is 45 + 23 - 17 + 9?", "reply-steered.png")
    # The model manager's pictures: tools/screenshots_model_manager.py.

    apply_theme(app, "dark", 11)
    w.new_chat()
    w.controller.set_depth("Max")
    mid_reply("What is 38 + 47 - 26?", "dark-mid-stream.png")
    w.controller.set_depth("Quick")
    w.input.setPlainText("What is 8 + 6?")
    w.send()
    wait(lambda: not w.controller.replies.busy)
    shoot(w, "dark-theme.png")
    w.close()


if __name__ == "__main__":
    main()
