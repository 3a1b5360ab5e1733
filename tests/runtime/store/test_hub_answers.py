"""The hub's answers and where the hub may send us, through the one opener (runtime/store/download/hub_http.py).

Classes, each with several variants:
- a metadata answer is bounded in size after decompression (a gzip bomb, a huge body) and in time as a
  whole (a trickle of bytes, of header bytes, a silence), and a stop (pause, cancel) acts on it in flight;
- redirects: a policy table (scheme, host, port, the hub's CDN), and through the stand-in: a chain too
  long, another host, another port, a public hub sending us to a local address;
- the token stays with the hub's origin for downloads, metadata and the nesting check's range reads.
"""

import os
import threading
import tracemalloc

import pytest

from runtime.store.download import hub_http
from runtime.store.download.hub_files import MetadataStopped, resolve
from runtime.store.download.hub_http import redirect_problem
from runtime.store.download.transfer import DONE, Download, DownloadError
from runtime.store.nesting.tensor_source import HubSource, ReadCancelled
from tests.hub_stub import HubStub

REPO = "nvidia/Answers"
FILES = {"config.json": b'{"a": 1}\n', "model.safetensors": os.urandom(200_000)}


def start_stub(tmp_path, name: str) -> HubStub:
    (tmp_path / name).mkdir()
    return HubStub({REPO: tmp_path / name}, virtual={REPO: dict(FILES)}).__enter__()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    stub = start_stub(tmp_path, "repo")
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setenv("HF_TOKEN", "secret")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "home"))
    yield stub
    stub.__exit__()


@pytest.fixture
def other_port(tmp_path):
    """A second HTTP service on this machine (another port): the one a hostile redirect aims at."""
    stub = start_stub(tmp_path, "elsewhere")
    yield stub
    stub.__exit__()


# ----------------------------------------------------------------------------- metadata: size

@pytest.mark.parametrize("fault", [{"gzip_bomb": 1 << 30}, {"gzip_bomb": 96 << 20}, {"pad": 80 << 20}],
                         ids=["gzip-1GiB", "gzip-96MiB", "plain-80MB"])
def test_a_metadata_answer_is_bounded_after_decompression(hub, fault):
    hub.api_faults.update(fault)
    tracemalloc.start()
    try:
        with pytest.raises(DownloadError, match=r"larger than 64 MB( once decompressed)?; refusing it"):
            resolve(REPO)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if "gzip_bomb" in fault:  # the stand-in's own copy is a megabyte: the inflated bytes never pile up
        assert peak < 200 << 20


def test_an_answer_just_under_the_bound_is_read(hub):
    hub.api_faults["pad"] = 32 << 20
    assert {f.path for f in resolve(REPO).files} == set(FILES)


# ----------------------------------------------------------------------------- metadata: time

SLOW = [{"trickle": 0.2}, {"slow_headers": 0.2}, {"silent": 40}]


@pytest.mark.parametrize("fault", SLOW, ids=["body-trickle", "header-trickle", "silent"])
def test_a_slow_metadata_answer_meets_an_overall_deadline(hub, fault):
    """Each read returns in time (a byte every 0.2 s); only a deadline over the whole call ends it."""
    hub.api_faults.update(fault)
    with pytest.raises(DownloadError, match=r"did not finish saying what nvidia/Answers holds within 2 s"):
        resolve(REPO, deadline_s=2)


@pytest.mark.parametrize("fault", SLOW, ids=["body-trickle", "header-trickle", "silent"])
def test_a_stop_acts_on_a_metadata_call_in_flight(hub, fault):
    hub.api_faults.update(fault)
    asked = threading.Event()
    threading.Timer(0.5, asked.set).start()
    with pytest.raises(MetadataStopped, match="stopped before the hub said"):
        resolve(REPO, stop=asked.is_set)
    assert len(hub.api_requests) == 1


def test_a_stop_asked_before_the_call_is_honoured(hub):
    with pytest.raises(MetadataStopped):
        resolve(REPO, stop=lambda: True)


# ----------------------------------------------------------------------------- redirects: the policy

HF = "https://huggingface.co"
POLICY = [
    (HF, "https://huggingface.co/api/resolve-cache/models/x", None),
    (HF, "https://cdn-lfs.hf.co/repos/ab/cd", None),
    (HF, "https://cas-bridge.xethub.hf.co/xet-bridge-us/x", None),
    (HF, "https://us-east-1.aws.cdn.hf.co/x", None),
    (HF, "https://cdn-lfs.huggingface.co/x", None),
    (HF, "https://evil.example/x", "another host"),
    (HF, "https://hf.co.evil.example/x", "another host"),
    (HF, "https://evilhf.co/x", "another host"),
    (HF, "https://127.0.0.1/x", "another host"),
    (HF, "https://[::1]/x", "another host"),
    (HF, "http://cdn-lfs.hf.co/x", "leave https"),
    (HF, "https://cdn-lfs.hf.co:8443/x", "another port"),
    (HF, "file:///etc/passwd", "not an http"),
    (HF, "https://cdn-lfs.hf.co:99999/x", "port is not a number"),
    ("https://hf-mirror.example", "https://cdn.hf-mirror.example/x", None),
    ("https://hf-mirror.example", "https://cdn-lfs.hf.co/x", "another host"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000/elsewhere", None),
    ("http://127.0.0.1:5000", "http://127.0.0.1:6000/x", "another port"),
    ("http://127.0.0.1:5000", "http://localhost:5000/x", "another host"),
    ("http://127.0.0.1:5000", "http://127.0.0.2:5000/x", "another host"),
]


@pytest.mark.parametrize(("hub_url", "target", "problem"), POLICY, ids=range(len(POLICY)))
def test_the_redirect_policy(hub_url, target, problem):
    found = redirect_problem(hub_url, hub_url + "/nvidia/x/resolve/main/model.safetensors", target)
    assert (found is None) if problem is None else (problem in found)


# ----------------------------------------------------------------------------- redirects: followed or not

def test_a_redirect_chain_is_followed_only_so_far(hub, tmp_path):
    hub.faults["model.safetensors"] = {"redirects": 3}
    assert Download(resolve(REPO), tmp_path / "ok").run().state == DONE
    hub.faults["model.safetensors"] = {"redirects": 50}
    with pytest.raises(DownloadError, match="redirected more than 5 times in a row"):
        Download(resolve(REPO), tmp_path / "loop").run()
    assert hub.faults["model.safetensors"]["redirects"] == 50 - 6  # five followed, the sixth refused


@pytest.mark.parametrize("where", ["localhost", "another-port"])
def test_a_redirect_to_another_local_service_is_refused_and_gets_nothing(hub, other_port, tmp_path, where):
    port = hub.url.rsplit(":", 1)[1]
    target = f"http://localhost:{port}" if where == "localhost" else other_port.url
    hub.faults["model.safetensors"] = {"redirect": f"{target}/{REPO}/resolve/x/{{path}}"}
    with pytest.raises(DownloadError, match="refusing it") as e:
        Download(resolve(REPO), tmp_path / "dl", token="secret").run()
    assert "\n" not in str(e.value) and not (tmp_path / "dl" / "model.safetensors").exists()
    assert not other_port.headers_seen and len([h for h in hub.headers_seen if h["path"] == "model.safetensors"]) == 1


def test_a_public_hub_may_not_send_us_to_a_local_address(hub, tmp_path, monkeypatch):
    """The stand-in made to look public until it sends the redirect: its redirect to a name in its CDN
    pattern that is at a loopback address is refused on the socket, before anything is sent there."""
    def redirected():
        return any(h["path"] == "model.safetensors" for h in hub.headers_seen)

    monkeypatch.setattr(hub_http, "is_public", lambda address: not redirected())
    monkeypatch.setitem(hub_http.CDN_DOMAINS, "127.0.0.1", ("localhost",))
    port = hub.url.rsplit(":", 1)[1]
    hub.faults["model.safetensors"] = {"redirect": f"http://localhost:{port}/{REPO}/resolve/x/{{path}}"}
    with pytest.raises(DownloadError, match="private or local address .* refusing it"):
        Download(resolve(REPO), tmp_path / "dl").run()
    assert len([h for h in hub.headers_seen if h["path"] == "model.safetensors"]) == 1


def test_a_metadata_redirect_follows_the_same_rules(hub, other_port):
    hub.api_faults["redirect"] = f"{other_port.url}/api/models/{REPO}"
    with pytest.raises(DownloadError, match="another port .* refusing it"):
        resolve(REPO)
    assert not other_port.api_requests


def test_the_metadata_token_stays_with_the_hub(hub, monkeypatch):
    monkeypatch.setitem(hub_http.CDN_DOMAINS, "127.0.0.1", ("localhost",))
    port = hub.url.rsplit(":", 1)[1]
    hub.api_faults["redirect"] = f"http://localhost:{port}/api/models/{REPO}"
    assert resolve(REPO).repo == REPO
    first, second = hub.api_requests
    assert first["auth"] == "Bearer secret" and second["host"].startswith("localhost") and second["auth"] is None


# ----------------------------------------------------------------------------- the nesting check's reads

def test_the_nesting_check_reads_through_the_same_opener(hub, other_port):
    """The token once reached another port through the nesting check's own opener."""
    source = HubSource(REPO)
    assert source.read("model.safetensors", 0, 8) == FILES["model.safetensors"][:8]
    assert hub.headers_seen[-1]["auth"] == "Bearer secret"
    hub.faults["model.safetensors"] = {"redirect": f"{other_port.url}/{REPO}/resolve/x/{{path}}"}
    with pytest.raises(DownloadError, match="another port .* refusing it"):
        source.read("model.safetensors", 100, 8)
    assert not other_port.headers_seen


def test_the_nesting_check_drops_the_token_across_origins(hub, monkeypatch):
    monkeypatch.setitem(hub_http.CDN_DOMAINS, "127.0.0.1", ("localhost",))
    port = hub.url.rsplit(":", 1)[1]
    hub.faults["model.safetensors"] = {"redirect": f"http://localhost:{port}/{REPO}/resolve/x/{{path}}"}
    assert HubSource(REPO).read("model.safetensors", 16, 8) == FILES["model.safetensors"][16:24]
    first, second = [h for h in hub.headers_seen if h["path"] == "model.safetensors"]
    assert first["auth"] == "Bearer secret" and second["auth"] is None and second["host"].startswith("localhost")


@pytest.mark.parametrize("fault", [{"trickle": 0.5}, {"silent": 60}], ids=["trickle", "silent"])
def test_a_stop_acts_on_a_range_read_in_flight(hub, fault):
    stop = threading.Event()
    source = HubSource(REPO, stop=stop)
    hub.faults["model.safetensors"] = fault
    threading.Timer(0.5, stop.set).start()
    with pytest.raises(ReadCancelled):
        source.read("model.safetensors", 0, 64)


def test_a_range_read_meets_a_deadline(hub, monkeypatch):
    from runtime.store.nesting import tensor_source

    monkeypatch.setattr(tensor_source, "RANGE_DEADLINE_S", 1.5)
    hub.faults["model.safetensors"] = {"trickle": 0.1}
    with pytest.raises(DownloadError, match="did not send 4,096 bytes within 2 s"):
        HubSource(REPO).read("model.safetensors", 0, 4096)
