"""A consent covers one tool of one server, as both were defined when it was given (issue 37, item 5).

Keyed on the bare name, "Always allow this tool in this chat" for the calc server's `add_numbers` let
another approved server's `add_numbers` run unasked (reproduced both ways). Here two real MCP servers
offer that name (tests/runtime/mcp/calc_server.py and twin_server.py), one running at a time (a
manager never offers two tools of one name at once), and every change asks again: another server,
the same server redefined, the tool's description or schema changed."""

import sys

import pytest

from runtime.events import END_OF_TURN, TOOL_CALLS, Done, ToolCall
from runtime.generate import ChatRequest
from runtime.mcp.client import McpManager
from runtime.mcp.config import ServerConfig
from runtime.tool_loop import ALLOW_IN_CHAT, DECLINE, ChatTools, ToolResult, consent_key, run_tool_loop
from tests.paths import ROOT

pytestmark = pytest.mark.slow  # server processes

HERE = ROOT / "tests" / "runtime" / "mcp"
CALC = ServerConfig("calc", command=sys.executable, args=(str(HERE / "calc_server.py"),))
TWIN = ServerConfig("twin", command=sys.executable, args=(str(HERE / "twin_server.py"),))
TWIN_AS_CALC = ServerConfig("calc", command=sys.executable, args=(str(HERE / "twin_server.py"),))  # same name
TWIN_REDESCRIBED = ServerConfig("twin", command=sys.executable, args=TWIN.args,
                                env=(("TWIN_DESCRIPTION", "Adds two integers and mails them out."),))
TWIN_RESHAPED = ServerConfig("twin", command=sys.executable, args=TWIN.args, env=(("TWIN_EXTRA", "1"),))
REQUEST = ChatRequest(({"role": "user", "content": "1 + 2?"},), None, "full", tools=())


def one_call_stream():
    """A reply that calls add_numbers(1, 2) once, then answers."""
    rounds = iter([True, False])

    def stream(request, controls):
        if next(rounds):
            call = ToolCall("call_1", "add_numbers", {"a": 1, "b": 2}, 0)
            yield Done(TOOL_CALLS, "", "", None, "full", None, tool_calls=(call,))
        else:
            yield Done(END_OF_TURN, "", "done", None, "full", None)
    return stream


def ask(manager, chat: ChatTools, answer: str):
    """One reply with one call of add_numbers: (was the user asked, the result)."""
    asked = []

    def consent(call):
        asked.append(call)
        return answer
    events = list(run_tool_loop(one_call_stream(), REQUEST, manager, consent, chat_tools=chat, constrain=False))
    result = next(e for e in events if isinstance(e, ToolResult))
    return bool(asked), result


@pytest.fixture
def manager():
    m = McpManager(lambda s: True, start_timeout_s=60, call_timeout_s=60)
    yield m
    m.close()


def switch(manager, old: ServerConfig, new: ServerConfig) -> None:
    manager.stop(old.name)
    manager.start(new)


CHANGES = [(CALC, TWIN), (TWIN, CALC), (CALC, TWIN_AS_CALC), (TWIN_AS_CALC, CALC), (TWIN, TWIN_REDESCRIBED),
           (TWIN, TWIN_RESHAPED), (TWIN_RESHAPED, TWIN)]
IDS = ["calc, then twin", "twin, then calc", "calc, then another command named calc", "the other way",
       "description changed", "schema changed", "schema changed back"]


@pytest.mark.parametrize("first, then", CHANGES, ids=IDS)
def test_allowed_in_this_chat_covers_that_tool_of_that_server_only(manager, first, then):
    chat = ChatTools()
    manager.start(first)
    asked, result = ask(manager, chat, ALLOW_IN_CHAT)
    assert asked and result.status == "ok"
    asked, result = ask(manager, chat, DECLINE)
    assert not asked and result.status == "ok"  # the same tool again: allowed in this chat
    switch(manager, first, then)
    asked, result = ask(manager, chat, DECLINE)
    assert asked, "another server's (or a changed) tool of the same name ran without asking"
    assert result.status == "declined"


@pytest.mark.parametrize("first, then", CHANGES, ids=IDS)
def test_allowed_always_covers_that_tool_of_that_server_only(manager, first, then):
    manager.start(first)
    chat = ChatTools(always_allowed=frozenset({consent_key(manager.tool("add_numbers"))}))
    asked, result = ask(manager, chat, DECLINE)
    assert not asked and result.status == "ok"
    switch(manager, first, then)
    asked, result = ask(manager, chat, DECLINE)
    assert asked and result.status == "declined"


def test_a_tool_that_changes_while_the_user_is_asked_is_not_run(manager):
    manager.start(CALC)

    def consent(call):
        switch(manager, CALC, TWIN)  # the server behind the name changes during the dialog
        return "once"
    events = list(run_tool_loop(one_call_stream(), REQUEST, manager, consent, chat_tools=ChatTools(),
                                constrain=False))
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.status == "declined" and "changed" in result.content and result.server == "calc"
