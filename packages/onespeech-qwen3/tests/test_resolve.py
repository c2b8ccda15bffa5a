"""resolve(): fetch from a real local HTTP server, verify, convert, install, lock, offline.

The served repository is a tiny publisher-layout checkpoint built by
``onespeech_tools.checkpoints.make_checkpoint``; the catalog entry for it is built
here from its files (the real pins cannot be served: no real weights).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from onespeech.kernels.catalog import entry_from_data
from onespeech.kernels.errors import ModelIntegrityError, PublisherFilesMissingError
from onespeech.kernels.fetch import FetchOptions, OfflineModeError
from onespeech.kernels.resolve import install_record_name, resolve
from onespeech.kernels.store import UnsafeFileNameError, read_manifest, sha256_file, write_manifest

REPO, REV = "Test/Qwen3-ASR-tiny", "1" * 40



@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory, shared_data) -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    out = make_checkpoint(tmp_path_factory.mktemp("tiny") / "Qwen3-ASR-tiny", "tiny", data_dir=shared_data)
    (out / "README.md").write_text("tiny test model\n")
    return out


def catalog_data(repo_dir: Path) -> dict:
    files = {}
    for path in sorted(repo_dir.iterdir()):
        d = sha256_file(path)
        files[path.name] = {"size": d.size, "sha256": d.sha256, "required": path.name != "README.md"}
    unrep = {"status": "unreproducible", "reason": "test entry", "files": None}
    return {
        "schema": "onespeech-catalog/1", "id": REPO, "kind": "asr", "license": "Apache-2.0",
        "provenance": "built by the test from make_checkpoint(..., 'tiny')",
        "source": {"type": "huggingface", "repo": REPO, "revision": REV, "files": files},
        "runtime": {"fp32": dict(unrep), "bf16": dict(unrep)},
    }  # fmt: skip


@pytest.fixture()
def entry(tiny_repo):
    return entry_from_data(catalog_data(tiny_repo))


@pytest.fixture()
def server(tiny_repo, hub_server_cls):
    hub = hub_server_cls().start()
    hub.add_repo(REPO, REV, tiny_repo)
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("ONESPEECH_HOME", str(home))
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    return home


class CountingConverter:
    """A deterministic stand-in converter: one weights file per precision + its own manifest.

    It reads the real publisher files (the safetensors bytes and config.json), so a
    wrong or missing publisher file shows up in its output.
    """

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.delay_s, self.fail = delay_s, fail

    def __call__(self, publisher: Path, staging: Path, precision: str, revision: str | None = None) -> None:
        self.calls.append(precision)
        time.sleep(self.delay_s)
        data = (publisher / "model.safetensors").read_bytes()
        (staging / f"weights.{precision}.bin").write_bytes(data[::2] if precision == "bf16" else data)
        if self.fail:
            raise RuntimeError("converter crashed")
        for name in ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            (staging / name).write_bytes((publisher / name).read_bytes())
        write_manifest(staging, [f"weights.{precision}.bin", "config.json"], name=f"manifest.{precision}.json")


def opts(server) -> FetchOptions:
    return FetchOptions(endpoint=server.endpoint, retries=1, backoff_s=0.01, progress=False)


def test_first_pull_fetches_converts_fp32_only(home, server, entry, tiny_repo):
    conv = CountingConverter()
    runtime = resolve(entry, fetch_options=opts(server), converter=conv)
    assert runtime == home / "models" / "Test--Qwen3-ASR-tiny" / REV / "runtime"
    assert conv.calls == ["fp32"]
    record = read_manifest(runtime, name=install_record_name("fp32"))
    assert record.metadata["revision"] == REV and record.metadata["precision"] == "fp32"
    assert "weights.fp32.bin" in record.files and not (runtime / "weights.bf16.bin").exists()
    assert not (runtime / install_record_name("bf16")).exists()
    # only required publisher files were fetched (not the README)
    fetched = {r.path.rsplit("/", 1)[-1] for r in server.requests}
    assert fetched == {f.name for f in entry.files if f.required}
    assert not list(runtime.parent.glob(".staging-*"))
    assert not (runtime.parent / ".lock").exists()


def test_second_resolve_neither_fetches_nor_converts(home, server, entry):
    conv = CountingConverter()
    resolve(entry, fetch_options=opts(server), converter=conv)
    n = len(server.requests)
    resolve(entry, fetch_options=opts(server), converter=conv)
    assert len(server.requests) == n and conv.calls == ["fp32"]


def test_offline_with_and_without_cache(home, server, entry, monkeypatch):
    conv = CountingConverter()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineModeError, match="model.safetensors") as exc:
        resolve(entry, fetch_options=opts(server), converter=conv)
    assert "config.json" in str(exc.value) and server.requests == [] and conv.calls == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    resolve(entry, fetch_options=opts(server), converter=conv)
    n = len(server.requests)
    monkeypatch.setenv("ONESPEECH_OFFLINE", "1")
    assert resolve(entry, fetch_options=opts(server), converter=conv).is_dir()
    assert len(server.requests) == n


def test_offline_conversion_from_cached_publisher_files(home, server, entry):
    conv = CountingConverter()
    runtime = resolve(entry, fetch_options=opts(server), converter=conv)
    os.remove(runtime / install_record_name("fp32"))  # publisher files cached, runtime not installed
    n = len(server.requests)
    resolve(entry, offline=True, fetch_options=opts(server), converter=conv)
    assert conv.calls == ["fp32", "fp32"] and len(server.requests) == n


def test_bf16_converts_from_cache_without_downloading(home, server, entry):
    conv = CountingConverter()
    runtime = resolve(entry, fetch_options=opts(server), converter=conv)
    fp32 = runtime / "weights.fp32.bin"
    before = os.stat(fp32)
    n = len(server.requests)
    assert resolve(entry, "bf16", fetch_options=opts(server), converter=conv) == runtime
    assert conv.calls == ["fp32", "bf16"] and len(server.requests) == n
    assert (runtime / install_record_name("bf16")).is_file() and (runtime / "weights.bf16.bin").is_file()
    after = os.stat(fp32)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # FP32 untouched
    # both precisions now resolve without converting
    resolve(entry, "fp32", fetch_options=opts(server), converter=conv)
    resolve(entry, "bf16", fetch_options=opts(server), converter=conv)
    assert conv.calls == ["fp32", "bf16"]


def test_bf16_never_downloads(home, server, entry):
    with pytest.raises(PublisherFilesMissingError, match="never downloads") as exc:
        resolve(entry, "bf16", fetch_options=opts(server), converter=CountingConverter())
    assert "model.safetensors" in str(exc.value) and server.requests == []


def test_fp32_resolve_ignores_corrupt_bf16_files(home, server, entry):
    conv = CountingConverter()
    runtime = resolve(entry, "fp32", fetch_options=opts(server), converter=conv)
    resolve(entry, "bf16", fetch_options=opts(server), converter=conv)
    (runtime / "weights.bf16.bin").write_bytes(b"garbage")
    resolve(entry, "fp32", fetch_options=opts(server), converter=conv)  # never validates BF16 files
    with pytest.raises(ModelIntegrityError, match="weights.bf16.bin"):
        resolve(entry, "bf16", fetch_options=opts(server), converter=conv)


def test_corrupt_runtime_file_named_then_rebuilt(home, server, entry, tiny_repo):
    conv = CountingConverter()
    runtime = resolve(entry, fetch_options=opts(server), converter=conv)
    target = runtime / "weights.fp32.bin"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x40
    target.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError) as exc:
        resolve(entry, fetch_options=opts(server), converter=conv)
    assert exc.value.path == str(target) and f"remove {target}" in str(exc.value)
    os.remove(exc.value.path)
    n = len(server.requests)
    resolve(entry, fetch_options=opts(server), converter=conv)
    assert conv.calls == ["fp32", "fp32"] and len(server.requests) == n
    assert sha256_file(target) == sha256_file(tiny_repo / "model.safetensors")


def test_corrupt_cached_publisher_file_named_then_refetched(home, server, entry, tiny_repo):
    pub = home / "models" / "Test--Qwen3-ASR-tiny" / REV / "publisher"
    pub.mkdir(parents=True)
    (pub / "config.json").write_text('{"tampered": true}')
    conv = CountingConverter()
    with pytest.raises(ModelIntegrityError, match="publisher file") as exc:
        resolve(entry, fetch_options=opts(server), converter=conv)
    assert exc.value.path == str(pub / "config.json") and conv.calls == []
    os.remove(exc.value.path)
    runtime = resolve(entry, fetch_options=opts(server), converter=conv)
    assert (runtime / "config.json").read_bytes() == (tiny_repo / "config.json").read_bytes()


def test_corrupt_download_is_never_converted(home, server, entry):
    server.misbehave("model.safetensors", corrupt=True)
    conv = CountingConverter()
    with pytest.raises(ModelIntegrityError, match="SHA-256") as exc:
        resolve(entry, fetch_options=opts(server), converter=conv)
    assert exc.value.path.endswith("model.safetensors") and conv.calls == []
    assert not Path(exc.value.path + ".part").exists()  # discarded: the retry downloads afresh
    server.behaviour.clear()
    resolve(entry, fetch_options=opts(server), converter=conv)
    assert conv.calls == ["fp32"]


def test_failed_conversion_installs_nothing(home, server, entry):
    with pytest.raises(RuntimeError, match="converter crashed"):
        resolve(entry, fetch_options=opts(server), converter=CountingConverter(fail=True))
    model_dir = home / "models" / "Test--Qwen3-ASR-tiny" / REV
    assert not (model_dir / "runtime").exists()
    assert not list(model_dir.glob(".staging-*")) and not (model_dir / ".lock").exists()


def test_output_checked_against_catalog_runtime_pins(home, server, tiny_repo):
    data = catalog_data(tiny_repo)
    good = CountingConverter()
    runtime = resolve(entry_from_data(data), fetch_options=opts(server), converter=good)
    record = read_manifest(runtime, name=install_record_name("fp32"))
    assert record.metadata["pinned"] is False
    pins = {n: {"size": d.size, "sha256": d.sha256} for n, d in record.files.items()}
    data["runtime"]["fp32"] = {"status": "pinned", "converter": "test", "files": pins}
    os.remove(runtime / install_record_name("fp32"))
    resolve(entry_from_data(data), fetch_options=opts(server), converter=good)
    assert read_manifest(runtime, name=install_record_name("fp32")).metadata["pinned"] is True
    # a converter whose output differs from the pin is refused and nothing is installed
    os.remove(runtime / install_record_name("fp32"))
    pins["weights.fp32.bin"]["sha256"] = "0" * 64
    with pytest.raises(ModelIntegrityError, match="catalog pins"):
        resolve(entry_from_data(data), fetch_options=opts(server), converter=good)
    assert not (runtime / install_record_name("fp32")).exists()


def test_resolve_by_id_with_custom_catalog_dir(home, server, tiny_repo, tmp_path, monkeypatch):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "tiny.json").write_text(json.dumps(catalog_data(tiny_repo)))
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    runtime = resolve(REPO, catalog_dir=tmp_path / "cat", progress=False, converter=CountingConverter())
    assert (runtime / install_record_name("fp32")).is_file()


def test_local_publisher_directory(home, tiny_repo, tmp_path):
    local = tmp_path / "finetune"
    local.mkdir()
    for p in tiny_repo.iterdir():
        (local / p.name).write_bytes(p.read_bytes())
    conv = CountingConverter()
    runtime = resolve(local, kind="asr", converter=conv)
    assert runtime == local  # converted in place, beside the publisher files
    assert not (home / "local").exists()
    record = read_manifest(runtime, name=install_record_name("fp32"))
    assert record.metadata["source"]["model.safetensors"]["sha256"] == sha256_file(local / "model.safetensors").sha256
    resolve(local, kind="asr", converter=conv)
    assert conv.calls == ["fp32"]
    # source digests are compared at every load: a changed source is converted again
    (local / "model.safetensors").write_bytes((local / "model.safetensors").read_bytes()[::-1])
    resolve(local, kind="asr", converter=conv)
    assert conv.calls == ["fp32", "fp32"]
    assert (runtime / "weights.fp32.bin").read_bytes() == (local / "model.safetensors").read_bytes()
    # and a corrupted runtime file is named
    (runtime / "weights.fp32.bin").write_bytes(b"x")
    with pytest.raises(ModelIntegrityError, match="weights.fp32.bin"):
        resolve(local, kind="asr", converter=conv)


def test_read_only_local_directory_is_converted_into_the_cache(home, tiny_repo, tmp_path):
    local = tmp_path / "readonly"
    local.mkdir()
    for p in tiny_repo.iterdir():
        (local / p.name).write_bytes(p.read_bytes())
    local.chmod(0o555)
    try:  # even as root, who could write there: the folder's mode says it is not ours to write
        conv = CountingConverter()
        runtime = resolve(local, kind="asr", converter=conv)
        assert runtime.parent.parent == home / "local"
        assert resolve(local, kind="asr", converter=conv) == runtime and conv.calls == ["fp32"]
    finally:
        local.chmod(0o755)


def test_local_runtime_directory_is_verified_and_returned(home, server, entry):
    runtime = resolve(entry, fetch_options=opts(server), converter=CountingConverter())
    assert resolve(runtime, kind="asr", converter=CountingConverter()) == runtime
    with open(runtime / "config.json", "ab") as f:
        f.write(b" ")
    with pytest.raises(ModelIntegrityError, match="config.json"):
        resolve(runtime, kind="asr")


CONVERT_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from onespeech.kernels.errors import ConversionInProgressError
    from onespeech.kernels.fetch import FetchOptions
    from onespeech.kernels.store import write_manifest
    from onespeech.kernels.catalog import entry_from_data
    from onespeech.kernels.resolve import resolve

    catalog, endpoint, started = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    def slow_converter(publisher, staging, precision, revision):
        started.write_text("converting")
        time.sleep(4.0)
        (staging / "weights.bin").write_bytes((publisher / "model.safetensors").read_bytes()[:1000])
        write_manifest(staging, ["weights.bin"], name="manifest.fp32.json")

    entry = entry_from_data(json.loads(Path(catalog).read_text()))
    try:
        runtime = resolve(entry, fetch_options=FetchOptions(endpoint=endpoint, progress=False),
                          converter=slow_converter)
    except ConversionInProgressError as e:
        print("IN_PROGRESS", e, flush=True)
        sys.exit(3)
    print("OK", runtime, flush=True)
    """
)


def test_two_processes_converting_at_once(home, server, tiny_repo, tmp_path):
    catalog = tmp_path / "entry.json"
    catalog.write_text(json.dumps(catalog_data(tiny_repo)))
    env = {**os.environ, "ONESPEECH_HOME": str(home)}

    def start(tag: str) -> tuple[subprocess.Popen, Path]:
        flag = tmp_path / f"started-{tag}"
        cmd = [sys.executable, "-c", CONVERT_SCRIPT, str(catalog), server.endpoint, str(flag)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), flag

    first, first_flag = start("a")
    deadline = time.monotonic() + 60
    while not first_flag.exists():  # wait until the first is inside its conversion
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second, second_flag = start("b")
    out2, err2 = second.communicate(timeout=60)
    out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 3, (out2, err2)
    assert "retry after the other process completes" in out2 and f"pid {first.pid}" in out2
    assert not second_flag.exists()  # the second never converted
    # after the first completes, a retry succeeds at once without converting
    third, third_flag = start("c")
    out3, err3 = third.communicate(timeout=60)
    assert third.returncode == 0 and out3.startswith("OK"), err3
    assert not third_flag.exists()


# -- with the real converter (onespeech.qwen3.convert) on the tiny checkpoint ------------------
def test_real_converter_first_pull_then_bf16(home, server, entry):
    from onespeech.qwen3 import convert
    from onespeech.qwen3.runtime import load_runtime

    runtime = resolve(entry, fetch_options=opts(server))
    names = {p.name for p in runtime.iterdir()}
    assert convert.manifest_name("fp32") in names and install_record_name("fp32") in names
    assert any(n.startswith("fp32-decoder") for n in names) and not any(n.startswith("bf16-") for n in names)
    manifest = read_manifest(runtime, name=convert.manifest_name("fp32"))
    assert manifest.metadata["revision"] == REV
    with load_runtime(runtime, "fp32") as model:
        assert model.precision == "fp32" and len(model) > 0
    fp32_state = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in runtime.glob("fp32-*")}
    n = len(server.requests)
    assert resolve(entry, "bf16", fetch_options=opts(server)) == runtime
    assert len(server.requests) == n  # BF16 never downloads
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in runtime.glob("fp32-*")} == fp32_state
    with load_runtime(runtime, "bf16") as model:
        assert model.precision == "bf16"


def test_real_converter_output_reproduces_as_runtime_pins(home, server, tiny_repo, tmp_path):
    """Runtime pins are reproducible: a second cache converts to exactly the recorded digests."""
    data = catalog_data(tiny_repo)
    first = resolve(entry_from_data(data), fetch_options=opts(server))
    recorded = read_manifest(first, name=install_record_name("fp32")).files
    data["runtime"]["fp32"] = {
        "status": "pinned", "converter": "onespeech.qwen3.convert",
        "files": {n: {"size": d.size, "sha256": d.sha256} for n, d in recorded.items()},
    }  # fmt: skip
    second = resolve(entry_from_data(data), cache_dir=tmp_path / "other-cache", fetch_options=opts(server))
    assert second != first
    record = read_manifest(second, name=install_record_name("fp32"))
    assert record.metadata["pinned"] is True and record.files == recorded


def test_local_dir_converted_in_place_by_runtime_is_accepted(home, tiny_repo, tmp_path):
    from onespeech.qwen3.runtime import ensure_runtime

    local = tmp_path / "m"
    local.mkdir()
    for p in tiny_repo.iterdir():
        (local / p.name).write_bytes(p.read_bytes())
    ensure_runtime(local, "fp32")
    assert resolve(local, kind="asr") == local
    assert not (home / "local").exists()


@pytest.mark.parametrize(
    "shard, error, match",
    [("../../evil.safetensors", UnsafeFileNameError, "'..'"),
     ("/etc/passwd", UnsafeFileNameError, "absolute"),
     ("model-00009-of-00009.safetensors", ModelIntegrityError, "does not pin")],
)  # fmt: skip
def test_remote_shard_names_are_checked_before_conversion(
    home, tiny_repo, tmp_path, shard, error, match, hub_server_cls
):
    repo = tmp_path / "sharded"
    repo.mkdir()
    for p in tiny_repo.iterdir():
        (repo / p.name).write_bytes(p.read_bytes())
    index = {"metadata": {}, "weight_map": {"a": "model.safetensors", "b": shard}}
    (repo / "model.safetensors.index.json").write_text(json.dumps(index))
    hub = hub_server_cls().start()
    hub.add_repo(REPO, REV, repo)
    conv = CountingConverter()
    try:
        with pytest.raises(error, match=match):
            resolve(entry_from_data(catalog_data(repo)), fetch_options=opts(hub), converter=conv)
    finally:
        hub.stop()
    assert conv.calls == []
    assert not any("evil" in r.path or "passwd" in r.path for r in hub.requests)
