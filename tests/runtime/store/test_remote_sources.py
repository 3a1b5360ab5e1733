"""Servers added as model sources: the file, the key in the OS keyring when there is one (a stand-in
backend here), in the file (the user's eyes only) when there is none, and the one line each says."""

import stat

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from runtime.errors import UsageError
from runtime.store import remote_sources as rs


class MemoryKeyring(KeyringBackend):
    priority = 1
    name = "test keyring"

    def __init__(self):
        super().__init__()
        self.items = {}

    def get_password(self, service, username):
        return self.items.get((service, username))

    def set_password(self, service, username, password):
        self.items[(service, username)] = password

    def delete_password(self, service, username):
        self.items.pop((service, username), None)


@pytest.fixture
def backend(home):
    before = keyring.get_keyring()
    yield lambda b: keyring.set_keyring(b)
    keyring.set_keyring(before)


def test_without_a_keyring_the_key_is_in_the_file_for_the_user_only_and_the_dialog_says_so(backend, home):
    backend(fail.Keyring())
    assert rs.keyring_name() is None and "No system keyring" in rs.where_keys_go()
    source = rs.add_source("http://gpu-box:8000", "star", "sk-1")
    assert (source.spec, source.key_store) == ("remote+http://gpu-box:8000/v1#star", rs.FILE_STORE)
    path = home / rs.FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert rs.read_key("http://gpu-box:8000/v1/") == "sk-1"
    assert rs.load_sources() == [source] and rs.parse_spec(source.spec) == ("http://gpu-box:8000/v1", "star")


def test_with_a_keyring_the_key_never_touches_the_file_and_goes_with_the_last_model(backend, home):
    ring = MemoryKeyring()
    backend(ring)
    assert "test keyring" in rs.where_keys_go()
    a = rs.add_source("http://gpu-box:8000/v1", "star", "sk-2")
    b = rs.add_source("http://gpu-box:8000/v1", "star:1.5M", "sk-2")
    assert a.key_store == b.key_store == rs.KEYRING and "sk-2" not in (home / rs.FILE).read_text()
    assert rs.read_key(a.url) == "sk-2"
    rs.remove_source(a.spec)
    assert ring.items  # the server's other model still needs it
    rs.remove_source(b.spec)
    assert not ring.items and rs.load_sources() == []
    with pytest.raises(UsageError, match="not an added server"):
        rs.remove_source(b.spec)


def test_a_damaged_file_or_entry_is_one_line_or_left_out(backend, home):
    backend(fail.Keyring())
    home.mkdir(parents=True)
    (home / rs.FILE).write_text('[{"url": "ftp://x", "model": "m"}, {"url": "http://h:1", "model": "ok"}, 7]')
    assert [s.model for s in rs.load_sources()] == ["ok"]
    (home / rs.FILE).write_text("{not json")
    with pytest.raises(UsageError, match="is damaged .*fix or remove it"):
        rs.load_sources()
    with pytest.raises(UsageError, match="does not name a server"):
        rs.parse_spec("remote+http://h:1")
