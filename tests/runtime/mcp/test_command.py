"""The command line's contract: `generate --mcp-config FILE [--allow-tools] --json` prints tool_call and
tool_result lines (exact keys), runs calls only with --allow-tools and says on stderr when it declines.
In-process, with the calc server over stdio; the tiny model's replies are spelled by a script."""

import json
from dataclasses import replace

import pytest

import runtime.generate
from runtime import cli
from runtime.tool_calls import format_tool_call
from tests.engine_support import Scripted

pytestmark = pytest.mark.slow  # a server process and two rounds of the tool prompt


@pytest.fixture
def config(tmp_path, calc_stdio):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"calc": calc_stdio.to_dict()}}))
    return path


def run(checkpoints, monkeypatch, capsys, config, *flags):
    real = runtime.generate.stream_chat
    scripts = []

    def scripted(engine, request, controls=None):
        if not scripts:
            scripts.append(Scripted(engine, [[format_tool_call("add_numbers", {"a": 145, "b": 223})],
                                             ["It is 368."]]))
        return real(engine, replace(request, logits_processors=(scripts[0],)), controls)
    monkeypatch.setattr(runtime.generate, "stream_chat", scripted)
    code = cli.main(["generate", "--checkpoint", str(checkpoints["hybrid"]), "--prompt", "What is 145 + 223?",
                     "--submodel", "full", "--thinking-budget", "0", "--temperature", "0", "--max-context", "4096",
                     "--mcp-config", str(config), "--json", *flags])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_allowed_calls_run_and_print_the_contract_lines(checkpoints, monkeypatch, capsys, config):
    code, lines, err = run(checkpoints, monkeypatch, capsys, config, "--allow-tools")
    assert code == 0, err
    call = next(line for line in lines if line.get("event") == "tool_call")
    result = next(line for line in lines if line.get("event") == "tool_result")
    assert {"id", "name", "arguments"} <= set(call) and call["name"] == "add_numbers"
    assert call["arguments"] == {"a": 145, "b": 223}
    assert {"id", "content", "is_error"} <= set(result)
    assert (result["id"], result["content"], result["is_error"]) == (call["id"], "368", False)
    assert lines[-1]["type"] == "done" and lines.index(call) < lines.index(result)
    answer = "".join(line["text"] for line in lines if line["type"] == "token" and line["phase"] == "answer")
    assert answer == "It is 368."
    assert "starting MCP server calc: " in err and "calc_server.py" in err


def test_without_allow_tools_each_call_is_declined_and_said_so(checkpoints, monkeypatch, capsys, config):
    code, lines, err = run(checkpoints, monkeypatch, capsys, config)
    result = next(line for line in lines if line.get("event") == "tool_result")
    assert code == 0 and result["is_error"] is True and result["status"] == "declined"
    assert "declined the tool call add_numbers (run with --allow-tools to allow tool calls)" in err


def test_a_bad_config_is_one_line_before_the_load(tmp_path, capsys):
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"x": {"command": 5}}}')
    assert cli.main(["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "hi", "--mcp-config",
                     str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "'x': the command must be text" in err and len(err.splitlines()) == 1


def test_the_command_line_on_stderr_shows_format_characters_escaped(checkpoints, monkeypatch, capsys, tmp_path,
                                                                     calc_stdio):
    """What `--mcp-config` is about to run is printed first: nothing in it is reordered or hidden."""
    import sys
    import unicodedata

    hidden = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")
    entry = {**calc_stdio.to_dict(), "env": {"NOTE": f"notes.txt\u202e\u2066 (read-only)\u2069{hidden}"}}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"calc": entry}}))
    code, _, err = run(checkpoints, monkeypatch, capsys, path, "--allow-tools")
    assert code == 0, err
    line = next(line for line in err.splitlines() if line.startswith("starting MCP server calc: "))
    assert not any(unicodedata.category(c) in ("Cf", "Cc") for c in line)
    assert "notes.txt\\u202e\\u2066 (read-only)\\u2069" in line
