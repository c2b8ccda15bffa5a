"""Fixtures shared by every package's tests.

Real data (tokenizer files, configs, speech clips, small real models) lives outside
git in ``shared/data``; it is found through ``ONESPEECH_TEST_DATA`` or the
``../shared/data`` folder beside the checkout. Reference observations produced by
``tox -e oracle`` live in ``ONESPEECH_ORACLE_DIR`` (default ``build/oracle``).
Tests that need either skip, naming what they need, when it is absent.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onespeech_tools.data import NEEDS, find_shared_data
from onespeech_tools.hub_server import HubServer

ROOT = Path(__file__).resolve().parent


def oracle_dir() -> Path:
    return Path(os.environ.get("ONESPEECH_ORACLE_DIR", ROOT / "build" / "oracle"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-data folder (tokenizer, configs, audio, models)."""
    path = find_shared_data()
    if path is None:
        pytest.skip(NEEDS)
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(shared_data: Path) -> Path:
    return shared_data / "tokenizer"


@pytest.fixture(scope="session")
def oracle_observations() -> Path:
    """Folder of reference observations written by ``tox -e oracle``."""
    path = oracle_dir()
    if not path.is_dir():
        pytest.skip(f"needs reference observations in {path} (run `tox -e oracle` first)")
    return path


@pytest.fixture(scope="session")
def hub_server_cls() -> type[HubServer]:
    """``HubServer``: a real HTTP server on 127.0.0.1 in the Hub's URL layout (onespeech_tools.hub_server)."""
    return HubServer


@pytest.fixture(scope="session")
def speaker_model_file(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """Resemblyzer's encoder converted once from the shared copy (None without the shared data)."""
    data = find_shared_data()
    if data is None:
        return None
    from onespeech.features.resemblyzer_convert import convert_resemblyzer

    source = data / "models" / "resemblyzer_pretrained.pt"
    return convert_resemblyzer(source, tmp_path_factory.mktemp("speaker-model") / "resemblyzer_ge2e.tensors")


@pytest.fixture(scope="session", autouse=True)
def _speaker_model_offline(speaker_model_file: Path | None) -> Iterator[None]:
    """File transcription attributes speakers by default: tests (and the worker processes they
    start) take the encoder from the shared data (ONESPEECH_SPEAKER_MODEL), never from the
    network; a test may override or unset it with monkeypatch."""
    with pytest.MonkeyPatch.context() as patch:
        if speaker_model_file is not None:
            patch.setenv("ONESPEECH_SPEAKER_MODEL", str(speaker_model_file))
        yield


@pytest.fixture(scope="session", autouse=True)
def _isolated_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests never read or write the developer's caches. Models are looked for in the Hugging Face
    cache before any download, so tests see an empty one (not ``~/.cache/huggingface``); our own
    store (models, verification stamps) is a fresh folder per session. A test may set either
    variable itself with monkeypatch."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-hub-cache")))
        patch.setenv("ONESPEECH_HOME", str(tmp_path_factory.mktemp("onespeech-home")))
        patch.delenv("HF_TOKEN", raising=False)
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[None]:
    """Folders a module-scoped fixture makes with ``tmp_path_factory`` are removed when its module
    ends, unless a test failed meanwhile (``tmp_path`` folders go at each passing test's teardown
    and the rest at a passing session's end: ``tmp_path_retention_policy``). Kept all session
    long, the tiny checkpoints the modules build add up to gigabytes on a small CI disk."""
    if fixturedef.scope != "module":
        yield
        return
    base = request.getfixturevalue("tmp_path_factory").getbasetemp()
    before, failed = set(base.iterdir()), request.session.testsfailed
    yield
    made = set(base.iterdir()) - before

    def remove() -> None:
        if request.session.testsfailed == failed:
            for path in made:  # numbered folders and their "current" links
                if path.is_symlink():
                    path.unlink()
                else:
                    shutil.rmtree(path, ignore_errors=True)

    if made:
        fixturedef.addfinalizer(remove)
