"""Every consumer of a setting derives from runtime/options.py: narrow one range there and the command
line, the server, the sampler, the settings file and the Settings dialog all follow, refusing a bad
value in the same words."""

import json
import math

import pytest

from app.state.settings import Settings, check_sampling
from runtime import options
from runtime.cli import main
from runtime.depth import depth_levels
from runtime.errors import UsageError
from runtime.sampling import SamplingSettings
from runtime.server.openai_api import parse_chat
from runtime.server.serving import ApiError, ServedModel
from tests.paths import DEMO

SERVED = ServedModel("demo", ("small", "mid", "full"), tuple(depth_levels(["small", "mid", "full"], 100)), 4096)


def refusals(capsys, tmp_path, name: str, value) -> dict[str, str]:
    """How each consumer refuses `name` = `value`: its one line, the part after the name as it spells it."""
    flag = "--" + name.replace("_", "-")
    out = {}
    assert main(["generate", "--checkpoint", str(DEMO), "--prompt", "hi", flag, repr(value)]) == 2
    line = capsys.readouterr().err.strip()
    out["cli"] = line.removeprefix(f"error: {flag}")
    with pytest.raises(ApiError) as e:
        parse_chat({"model": "demo", "messages": [{"role": "user", "content": "hi"}], name: value}, SERVED)
    assert e.value.status == 400 and e.value.param == name
    out["server"] = e.value.message.removeprefix(name)
    with pytest.raises(UsageError) as e:
        SamplingSettings(**{name: value}).check()
    out["sampler"] = str(e.value).removeprefix(name)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"sampling": {name: value}}))
    problem = Settings.load(path).problem
    start = problem.index(f"sampling.{name} is ")
    out["settings file"] = problem[start:].removeprefix(f"sampling.{name}").split(". The file as it was")[0]
    out["a chat's settings"] = check_sampling({name: value})[1][0].removeprefix(name)
    return out


@pytest.mark.parametrize("name,value", [("top_k", 2 ** 25), ("temperature", 2.5), ("top_p", 0.0), ("min_p", 1.0),
                                        ("temperature", -1.0)])
def test_a_bad_value_gets_the_same_message_everywhere(capsys, tmp_path, name, value):
    said = refusals(capsys, tmp_path, name, value)
    rule = options.OPTIONS[name].rule
    assert set(said.values()) == {f" is {value!r}; it must be {rule}"}, said


@pytest.fixture
def narrowed():
    """A test copy of the registry with other ranges: top-k at most 50, temperature from 0.1 to 1.5."""
    changes = {options.TOP_K: {"high": 50}, options.TEMPERATURE: {"low": 0.1, "high": 1.5}}
    before = {option: {k: getattr(option, k) for k in new} for option, new in changes.items()}
    for option, new in changes.items():
        for k, v in new.items():
            object.__setattr__(option, k, v)  # frozen on purpose; a test may change it in place, then undo it
    yield
    for option, old in before.items():
        for k, v in old.items():
            object.__setattr__(option, k, v)


def test_every_consumer_follows_the_registry(narrowed, capsys, tmp_path, qtbot):
    from app.widgets.settings_dialog import SettingsDialog

    for name, value in (("top_k", 60), ("temperature", 1.75), ("temperature", 0.05)):
        said = refusals(capsys, tmp_path, name, value)
        assert set(said.values()) == {f" is {value!r}; it must be {options.OPTIONS[name].rule}"}, said
    assert "from 0 to 50" in options.TOP_K.rule and "from 0.1 to 1.5" in options.TEMPERATURE.rule
    SamplingSettings(top_k=50, temperature=1.5).check()  # the new bounds themselves are fine
    dialog = SettingsDialog(None, Settings(), "", {})
    qtbot.addWidget(dialog)
    fields = dialog.default_sampling.fields
    assert fields["top_k"].maximum() == 50 and fields["top_k"].minimum() == 0
    assert math.isclose(fields["temperature"].minimum(), 0.1) and math.isclose(fields["temperature"].maximum(), 1.5)


def test_the_dialog_offers_exactly_what_the_file_accepts(qtbot):
    from app.state.settings import FONT_SIZE
    from app.widgets.settings_dialog import SettingsDialog

    dialog = SettingsDialog(None, Settings(), "", {})
    qtbot.addWidget(dialog)
    boxes = {**dialog.default_sampling.fields, "max_new_tokens": dialog.max_tokens, "font_size": dialog.font_size}
    for name, box in boxes.items():
        option = FONT_SIZE if name == "font_size" else options.OPTIONS[name]
        low, high = box.minimum(), box.maximum()
        assert option.check(low) == low and option.check(high) == high, name  # the box's ends are valid
        # and they are the range's ends, or one step of the box's precision inside an open end
        assert low == option.low or (option.low_open and 0 < low - option.low <= 0.01 + 1e-9), name
        assert high == option.high or (option.high_open and 0 < option.high - high <= 0.01 + 1e-9), name
        assert box.toolTip() and box.value() == option.default, name


@pytest.mark.parametrize("option,bad", [(options.ALLOW_HOSTS, "localhost."), (options.ALLOW_ORIGINS, "null")])
def test_a_bad_name_gets_its_rule_from_the_registry_everywhere(capsys, tmp_path, qtbot, option, bad):
    """serve's flag, the settings file and the Server tab refuse the entry by the same rule."""
    from app.widgets.server_settings import ServerSettingsBox

    rule = str(pytest.raises(ValueError, option.entry, bad).value)
    assert main(["serve", "--checkpoint", str(DEMO), option.flag, bad]) == 2
    said = {"cli": capsys.readouterr().err}
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"server_" + option.name: [bad]}))
    said["settings file"] = Settings.load(path).problem
    box = ServerSettingsBox(False, "127.0.0.1", 8000, "")
    qtbot.addWidget(box)
    (box.allow_hosts if option is options.ALLOW_HOSTS else box.allow_origins).setText(bad)
    said["dialog"] = box.problem()
    assert all(rule in text and repr(bad) in text for text in said.values()), said
