"""The page at ``/`` in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium).

The server runs on 127.0.0.1 with the tiny checkpoints. The tests upload a clip, wait for the
document, check the words, the speaker timeline and a download against the CLI's writers, and
record live finals from Chromium's fake microphone fed with a WAV file. Screenshots go under
``build/page/`` for review.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

pytest.importorskip("starlette", reason="needs onespeech-speech[server]")
uvicorn = pytest.importorskip("uvicorn", reason="needs onespeech-speech[server]")
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (a test dependency in tox.ini)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from onespeech.features import load_audio  # noqa: E402
from onespeech.speech.server import Backend, ServerConfig, create_app  # noqa: E402
from onespeech.speech.transcribe import transcribe  # noqa: E402
from onespeech.speech.writers import get_writer  # noqa: E402
from onespeech_tools.serving import serving  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "page"
BUDGET = 64
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip("needs Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`; "
                ".ci/run installs them)", allow_module_level=True)


API_KEY = "page-test-key"


@contextlib.contextmanager
def _serving(config: ServerConfig) -> Iterator[str]:
    with serving(create_app(Backend(config))) as port:
        yield f"http://127.0.0.1:{port}"


def _config(runtime_dirs, vad_path: Path, **extra: Any) -> ServerConfig:  # type: ignore[no-untyped-def]
    return ServerConfig(model=str(runtime_dirs.asr), aligner=str(runtime_dirs.aligner), vad=vad_path, threads=1,
                        max_new_tokens=BUDGET, workers=1, max_queue=2, **extra)


@pytest.fixture(scope="module")
def base_url(runtime_dirs, vad_path: Path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with _serving(_config(runtime_dirs, vad_path)) as url:
        yield url


@pytest.fixture(scope="module")
def microphone_wav(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the fake microphone plays: speech, then silence, so the VAD closes a region."""
    speech = load_audio(shared_data / "audio" / "jfk.flac")
    path = tmp_path_factory.mktemp("mic") / "mic.wav"
    soundfile.write(path, np.concatenate([speech, np.zeros(3 * 16000, np.float32)]), 16000, subtype="PCM_16")
    return path


def _browser(profile: Path, microphone: Path | None = None) -> Any:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    # as root in a closed network: no sandbox, and none of Chromium's own connections
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--window-size=1280,960", "--autoplay-policy=no-user-gesture-required",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if microphone is not None:
        options.add_argument("--use-fake-ui-for-media-stream")
        options.add_argument("--use-fake-device-for-media-stream")
        options.add_argument(f"--use-file-for-fake-audio-capture={microphone}")
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = _browser(tmp_path / "profile")
    try:
        yield driver
    finally:
        driver.quit()


def _download(driver: Any, link: Any, folder: Path) -> str:
    """Click a download link as a person would and read the file Chromium saved."""
    folder.mkdir(parents=True, exist_ok=True)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})
    link.click()
    target = folder / link.get_attribute("download")
    WebDriverWait(driver, 30).until(lambda d: target.is_file() and not list(folder.glob("*.crdownload")))
    return target.read_text(encoding="utf-8")


def _wait_for_document(driver: Any, timeout: float = 240) -> None:
    def ready(d: Any) -> bool:
        status = d.find_element(By.ID, "status")
        assert "error" not in (status.get_attribute("class") or ""), f"the page shows an error: {status.text}"
        return bool(d.find_elements(By.CSS_SELECTOR, "#download-json[href]"))

    WebDriverWait(driver, timeout, poll_frequency=0.2).until(ready)


def test_upload_shows_the_document_and_downloads_the_clis_files(base_url: str, browser: Any, runtime_dirs,  # type: ignore[no-untyped-def]
                                                                 vad_path: Path, clips: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    expected = transcribe(clips["flac"], runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner,
                          vad=vad_path, threads=1, max_new_tokens=BUDGET, progress=False, speakers="auto")
    assert expected.words and expected.speakers

    browser.get(base_url + "/")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "model").text.startswith("model "))
    browser.find_element(By.ID, "language").send_keys("en")
    browser.find_element(By.ID, "file").send_keys(str(clips["flac"]))
    _wait_for_document(browser)

    segments = browser.find_elements(By.CSS_SELECTOR, "#segments .segment")
    assert len(segments) == len(expected.segments)
    words = browser.find_elements(By.CSS_SELECTOR, "#segments .word")
    assert [w.text for w in words] == [w.text for w in expected.words]
    turns = browser.find_elements(By.CSS_SELECTOR, "#timeline .turn")
    speaking = {w.speaker for w in expected.words if w.speaker and w.start is not None}
    assert speaking and {t.get_attribute("data-speaker") for t in turns} == speaking
    assert all(t.size["width"] > 0 for t in turns)
    assert browser.find_element(By.ID, "language-out").text == expected.language

    for fmt in ("srt", "json", "tsv"):
        link = browser.find_element(By.ID, f"download-{fmt}")
        want = io.StringIO()
        get_writer(fmt).write(expected, want)
        assert link.get_attribute("download") == f"transcript.{fmt}"
        assert _download(browser, link, tmp_path / fmt) == want.getvalue(), fmt

    # a click on a word seeks the audio to its start and lights it up
    timed = [w for w in expected.words if w.start is not None]
    target = browser.find_elements(By.CSS_SELECTOR, "#segments .word[data-start]")[len(timed) // 2]
    start = float(target.get_attribute("data-start"))
    target.click()
    WebDriverWait(browser, 20).until(
        lambda d: abs(d.execute_script("return document.getElementById('player').currentTime") - start) < 0.5)
    browser.execute_script("const p = document.getElementById('player'); p.pause(); p.currentTime = arguments[0];",
                           start + 0.001)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#segments .word.active"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "document.png"))


def test_a_file_that_is_not_audio_shows_the_servers_message(base_url: str, browser: Any, tmp_path: Path) -> None:
    text = tmp_path / "notes.wav"
    text.write_text("these are meeting notes, not a recording\n")
    browser.get(base_url + "/")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "model").text.startswith("model "))
    browser.find_element(By.ID, "file").send_keys(str(text))
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 60).until(lambda d: "error" in (status.get_attribute("class") or ""))
    assert "audio" in status.text
    assert not browser.find_elements(By.CSS_SELECTOR, "#segments .segment")


def test_microphone_finals_arrive_over_the_websocket(base_url: str, microphone_wav: Path, tmp_path: Path) -> None:
    driver = _browser(tmp_path / "profile", microphone=microphone_wav)
    try:
        driver.get(base_url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "model").text.startswith("model "))
        driver.find_element(By.ID, "language").send_keys("en")
        driver.find_element(By.ID, "record").click()
        WebDriverWait(driver, 180, poll_frequency=0.5).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#finals .final"))
        driver.find_element(By.ID, "record").click()  # stop: the server flushes and says done
        WebDriverWait(driver, 120).until(lambda d: "live session done" in d.find_element(By.ID, "status").text)
        finals = driver.find_elements(By.CSS_SELECTOR, "#finals .final")
        assert finals and all(f.text.strip() for f in finals)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "live.png"))
    finally:
        driver.quit()


def test_page_assets_are_served_with_a_strict_policy(base_url: str) -> None:
    import httpx

    page = httpx.get(base_url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for name in ("app.js", "style.css"):
        assert httpx.get(f"{base_url}/static/{name}", timeout=10).status_code == 200
    missing = httpx.get(base_url + "/static/../server.py", timeout=10)
    assert missing.status_code == 404
    assert httpx.get(base_url + "/static/secret.py", timeout=10).json()["error"]["code"] == "not_found"


def test_render_refuses_what_is_not_a_document(base_url: str) -> None:
    import httpx

    bad_format = httpx.post(base_url + "/v1/documents/render?format=exe", json={}, timeout=10)
    assert bad_format.status_code == 400 and bad_format.json()["error"]["param"] == "format"
    not_json = httpx.post(base_url + "/v1/documents/render?format=srt", content=b"\xff{", timeout=10)
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_document"
    wrong = httpx.post(base_url + "/v1/documents/render?format=srt", json={"version": 99}, timeout=10)
    assert wrong.status_code == 400 and "version" in wrong.json()["error"]["message"]


def test_with_an_api_key_the_page_asks_for_it_and_sends_it(runtime_dirs, vad_path: Path, browser: Any) -> None:  # type: ignore[no-untyped-def]
    from websockets.sync.client import connect

    with _serving(_config(runtime_dirs, vad_path, api_key=API_KEY)) as url:
        browser.get(url + "/")  # the page itself needs no key: it asks for one
        status = browser.find_element(By.ID, "status")
        WebDriverWait(browser, 30).until(lambda d: "API key" in status.text)
        assert "error" in status.get_attribute("class")
        field = browser.find_element(By.ID, "api-key")
        field.send_keys(API_KEY)
        browser.find_element(By.ID, "language").click()  # leaving the field commits it
        WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "model").text.startswith("model "))
        assert API_KEY not in browser.page_source
        # the WebSocket takes the key as a query parameter, as the page sends it
        ws = url.replace("http://", "ws://") + "/v1/audio/stream"
        with connect(f"{ws}?api_key={API_KEY}") as socket:
            socket.send(json.dumps({"type": "finish"}))
            assert json.loads(socket.recv(timeout=30))["type"] == "done"
        with pytest.raises(Exception, match="401"):
            connect(f"{ws}?api_key=wrong").close()
