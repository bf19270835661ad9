"""The chat page in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by Selenium)
against the shared live server with the real SmolLM2 model: the model name shows, a message streams a reply
that appears before it is finished, Stop aborts it, a complete reply shows tokens/s, and the page fits a
phone-width screen. Missing Chromium, ChromeDriver or selenium: skipped locally, a failure with ``CI=true``.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_server_helpers import MODEL_NAME, shared_server

from tgcore.testing import headless_chromium
from tgcore.testing import wait_for as _wait_for

PHONE = {"width": 390, "height": 844, "pixelRatio": 3.0}  # a phone-width screen (CSS pixels)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(mobile=PHONE) as driver:
        yield driver


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    return _wait_for(condition, what, timeout)


def last_reply(driver: Any) -> Any:
    from selenium.webdriver.common.by import By
    replies = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    return replies[-1] if replies else None


def send(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = driver.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def test_chat_page_streams_stops_and_reports_speed(browser: Any) -> None:
    from selenium.webdriver.common.by import By
    server = shared_server()
    d = browser
    d.get(server.url("/"))
    wait_for(lambda: d.find_element(By.ID, "model-name").text == MODEL_NAME, 60, "the model name")
    wait_for(lambda: d.find_element(By.ID, "send").is_enabled(), 30, "the send button")

    # phone width: nothing overflows sideways, the controls are on screen
    width = d.execute_script("return window.innerWidth")
    assert width == PHONE["width"]
    assert d.execute_script("return document.documentElement.scrollWidth") <= width
    for control in ("input", "send", "stop"):
        box = d.find_element(By.ID, control).rect
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, control

    # a long reply: text appears while it is still streaming, then Stop aborts it
    max_tokens = d.find_element(By.ID, "max-tokens")
    d.execute_script("arguments[0].value = '60'", max_tokens)
    send(d, "Tell me a long story about a dragon.")
    wait_for(lambda: last_reply(d) is not None, 10, "the reply bubble")
    wait_for(lambda: last_reply(d).find_element(By.CLASS_NAME, "content").text.strip(), 180,
             "streamed text in the reply")
    reply = last_reply(d)
    assert "streaming" in reply.get_attribute("class")  # shown before the reply was finished
    assert d.find_element(By.ID, "stop").is_enabled()
    d.find_element(By.ID, "stop").click()
    wait_for(lambda: last_reply(d).get_attribute("data-done") == "stopped", 30, "the stop to take effect")
    assert "stopped" in last_reply(d).find_element(By.CLASS_NAME, "stats").text
    assert d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled()

    # a short reply runs to the end and reports tokens/s; the history holds both turns
    d.execute_script("arguments[0].value = '3'", max_tokens)
    send(d, "Say hi.")
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2, 10, "the second reply bubble")
    wait_for(lambda: last_reply(d).get_attribute("data-done"), 180, "the second reply to finish")
    reply = last_reply(d)
    assert reply.get_attribute("data-done") == "complete", reply.text
    stats = reply.find_element(By.CLASS_NAME, "stats").text
    assert "tok/s" in stats and stats.split()[0].isdigit() and 1 <= int(stats.split()[0]) <= 3, stats
    users = [m.text for m in d.find_elements(By.CSS_SELECTOR, ".msg.user")]
    assert users == ["Tell me a long story about a dragon.", "Say hi."]
    assert d.execute_script("return state.history.length") == 4
