"""mcp.json as other apps write it, checked as the outside input it is; approvals keyed on what runs."""

import json
import os
import stat
import sys

import pytest

from runtime.mcp.approvals import Approvals
from runtime.mcp.client import McpTool
from runtime.mcp.config import (
    ConfigError,
    McpConfig,
    ServerConfig,
    merge_imported,
    parse_config,
    read_config,
    write_config,
)

CLAUDE = {"mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/My Docs"]},
    "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"}},
    "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer abc"}, "type": "http"},
}, "globalShortcut": "Ctrl+Space"}  # another app's own keys are ignored


def test_reads_claude_desktop_and_lm_studio_files(tmp_path):
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(CLAUDE))
    config = read_config(path)
    assert config.names == ["filesystem", "github", "web"]
    fs = config.server("filesystem")
    assert fs.kind == "stdio" and fs.args[-1] == "/home/me/My Docs"
    assert fs.command_line() == "npx -y @modelcontextprotocol/server-filesystem '/home/me/My Docs'"
    assert config.server("github").command_line() == (
        "GITHUB_PERSONAL_ACCESS_TOKEN='<hidden, 10 characters>' docker run -i ghcr.io/github/github-mcp-server")
    assert "ghp_secret" in config.server("github").command_line(reveal=True)
    assert config.server("web").kind == "http"
    assert config.server("web").command_line() == "https://example.com/mcp [Authorization: <hidden, 10 characters>]"
    assert parse_config(config.to_dict()) == config  # written as read


@pytest.mark.parametrize("servers, says", [
    ({"a": {"args": []}}, "neither a \"command\" nor a \"url\""),
    ({"a": {"command": 3}}, "'a': the command must be text"),
    ({"a": {"command": ""}}, "command is empty"),
    ({"a": {"command": "x", "args": "-y"}}, "args must be a list"),
    ({"a": {"command": "x", "args": ["ok", 1]}}, "argument 2 must be text"),
    ({"a": {"command": "x\x00y"}}, "NUL"),
    ({"a": {"command": "x", "env": {"BAD KEY": "v"}}}, "not a valid variable name"),
    ({"a": {"command": "x", "env": {"K": 1}}}, "must be text"),
    ({"a": {"command": "x" * 9000}}, "longer than 8,192"),
    ({"a": {"url": "file:///etc/passwd"}}, "http:// or https://"),
    ({"a": {"url": "https://h/mcp", "headers": {"X": "a\r\nHost: evil"}}}, "line break"),
    ({"a": {"url": "https://h/mcp", "command": "x"}}, "both"),
    ({"a": {"url": "https://h/sse", "type": "sse"}}, "not supported"),
    ({"../etc": {"command": "x"}}, "is not valid"),
    ({"": {"command": "x"}}, "is not valid"),
    ({f"s{i}": {"command": "x"} for i in range(65)}, "more than 64"),
])
def test_refuses_what_it_cannot_use_naming_the_server_and_field(servers, says):
    with pytest.raises(ConfigError, match=None) as e:
        parse_config({"mcpServers": servers})
    assert says in str(e.value), str(e.value)


def test_bad_files_are_one_line_naming_the_file(tmp_path):
    for name, raw in [("list.json", b"[]"), ("broken.json", b"{\"mcpServers\": "), ("big.json", b" " * (2 << 20))]:
        path = tmp_path / name
        path.write_bytes(raw)
        with pytest.raises(ConfigError) as e:
            read_config(path)
        assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no such file"):
        read_config(tmp_path / "absent.json")
    assert read_config(tmp_path / "absent.json", missing_ok=True) == McpConfig()


def test_written_whole_and_private(tmp_path):
    path = tmp_path / "data" / "mcp.json"
    write_config(path, parse_config(CLAUDE))
    assert read_config(path).names == ["filesystem", "github", "web"]
    if sys.platform != "win32":
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["mcp.json"]  # no temporary file left


def test_import_adds_never_replaces():
    mine = parse_config({"mcpServers": {"github": {"command": "gh-mcp"}, "calc": {"command": "calc"}}})
    merged, added, skipped = merge_imported(mine, parse_config(CLAUDE | {"mcpServers": {
        **CLAUDE["mcpServers"], "calc": {"command": "calc"}}}))
    assert added == ["filesystem", "github-2", "web"] and skipped == ["calc"]
    assert merged.server("github").command == "gh-mcp"  # the user's own stays
    assert merged.server("github-2").command == "docker"


def test_approval_is_for_the_exact_command(tmp_path):
    path = tmp_path / "mcp_approvals.json"
    server = ServerConfig("calc", command="python", args=("calc.py",), env=(("TOKEN", "s3cret"),))
    approvals = Approvals(path)
    assert not approvals.is_approved(server)
    approvals.approve(server)
    add = McpTool("calc", "add_numbers", "Adds.", {"type": "object"})
    approvals.set_always_allowed(server, add, True)
    again = Approvals(path)  # remembered
    assert again.is_approved(server) and again.always_allowed(server) == {"add_numbers": add.definition}
    assert again.is_always_allowed(server, add)
    assert not again.is_always_allowed(server, McpTool("calc", "add_numbers", "Adds. And mails.", {"type": "object"}))
    assert "s3cret" not in path.read_text()  # digests only
    for changed in (ServerConfig("calc", command="python", args=("evil.py",), env=server.env),
                    ServerConfig("calc", command="python", args=server.args, env=(("TOKEN", "other"),)),
                    ServerConfig("calc2", command="python", args=server.args, env=server.env)):
        assert not again.is_approved(changed) and again.always_allowed(changed) == {}
    again.revoke("calc")
    assert not Approvals(path).is_approved(server)


def test_a_damaged_approvals_file_approves_nothing(tmp_path):
    path = tmp_path / "mcp_approvals.json"
    server = ServerConfig("calc", command="python")
    path.write_text(json.dumps({"servers": {"calc": {"fingerprint": "x" * 64}, "other": "junk"}}))
    assert not Approvals(path).is_approved(server)
    path.write_text("{not json")
    approvals = Approvals(path)
    assert not approvals.is_approved(server) and "could not be read" in approvals.notice
