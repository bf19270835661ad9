"""The chat page's own behaviour in a real headless Chromium, without a model: the page is served as a static file and
its ``fetch`` is replaced (before the page's script runs) by a fake server whose answers each test sets. Checks the
markdown rendering and its sanitizer, conversations kept in localStorage, Copy and Regenerate, the "server
unreachable" status and its recovery, the wrong-API-key message, and that nothing is loaded from elsewhere. The
end-to-end page test with the real model is test_chat_page.py. Missing Chromium, ChromeDriver or selenium: skipped
locally, a failure with ``CI=true``.
"""
from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

from tgcore.testing import headless_chromium, wait_for

PAGE = resources.files("tg_llm").joinpath("static", "chat.html").read_text(encoding="utf-8")

# The fake server: its behaviour comes from localStorage["fake"] (set by a test, kept across reloads); each
# request is logged in localStorage["fake-calls"]. Replies stream as server-sent events, a few characters a chunk.
FAKE_FETCH = r"""
(() => {
  const config = () => JSON.parse(localStorage.getItem("fake") || "{}");
  const log = (entry) => {
    const calls = JSON.parse(localStorage.getItem("fake-calls") || "[]");
    calls.push(entry);
    localStorage.setItem("fake-calls", JSON.stringify(calls));
  };
  const json = (body, status) =>
    new Response(JSON.stringify(body), {status, headers: {"Content-Type": "application/json"}});
  window.prompt = () => config().key === undefined ? null : config().key;
  window.fetch = async (url, options) => {
    const c = config();
    url = String(url);
    log({url, body: options && options.body ? JSON.parse(options.body) : null,
         auth: options && options.headers ? options.headers.Authorization || null : null});
    if (c.down) throw new TypeError("Failed to fetch");
    if (url === "/health") return json({status: "ok"}, 200);
    if (url === "/v1/models") {
      const auth = options && options.headers && options.headers.Authorization;
      if (c.needKey && auth !== "Bearer " + c.needKey)
        return json({error: {message: "Incorrect API key provided.",
                             code: auth ? "invalid_api_key" : "missing_api_key"}}, 401);
      return json({object: "list", data: [{id: "fake-model"}]}, 200);
    }
    if (url === "/v1/chat/completions") {
      const replies = c.replies || ["ok"];
      const n = JSON.parse(localStorage.getItem("fake-replied") || "0");
      localStorage.setItem("fake-replied", JSON.stringify(n + 1));
      const text = replies[Math.min(n, replies.length - 1)];
      const events = [];
      for (let i = 0; i < text.length; i += 7)
        events.push({choices: [{index: 0, delta: {content: text.slice(i, i + 7)}, finish_reason: null}]});
      events.push({choices: [{index: 0, delta: {}, finish_reason: "stop"}]});
      events.push({choices: [], usage: {prompt_tokens: 5, completion_tokens: events.length - 1, total_tokens: 0}});
      const body = events.map((e) => "data: " + JSON.stringify(e) + "\n\n").join("") + "data: [DONE]\n\n";
      return new Response(new Blob([body]).stream(), {status: 200, headers: {"Content-Type": "text/event-stream"}});
    }
    return json({error: {message: "no such route"}}, 404);
  };
})();
"""


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    body = PAGE.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, data = (200, body) if self.path == "/" else (404, b"{}")
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200 else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with headless_chromium("--window-size=1200,900") as d:
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FAKE_FETCH})
        yield d


def open_page(d: Any, url: str, **fake: Any) -> None:
    """A fresh page (empty localStorage) whose fake server behaves as ``fake`` says; waits for it to connect."""
    d.get(url)
    d.execute_script("localStorage.clear(); localStorage.setItem('fake', arguments[0]);", json.dumps(fake))
    d.refresh()
    if not fake.get("down") and not fake.get("needKey"):
        wait_for(lambda: d.execute_script("return state.ready"), "the page to connect")


def status(d: Any) -> str:
    return str(d.execute_script("return document.getElementById('status').textContent"))


def send(d: Any, text: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    before = len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == before + 1, "the reply bubble")
    reply = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]
    wait_for(lambda: reply.get_attribute("data-done"), "the reply to finish")
    return reply


def calls(d: Any, url: str) -> list[dict]:
    return [c for c in json.loads(d.execute_script("return localStorage.getItem('fake-calls') || '[]'"))
            if c["url"] == url]


def test_markdown_is_rendered_and_nothing_in_a_reply_runs(driver: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By
    hostile = ("Here you go:\n```python\nprint('<b>hi</b>')\n```\n"
               "<script>window.pwned = 1</script> **bold** and `x < y` "
               "<img src=x onerror=\"window.pwned = 2\"> [bad](javascript:window.pwned=3) [good](https://example.com/a)\n"
               "- one\n- *two*")
    open_page(driver, page_url, replies=[hostile])
    reply = send(driver, "show me")
    assert reply.get_attribute("data-done") == "complete"
    content = reply.find_element(By.CLASS_NAME, "content")
    code = content.find_element(By.CSS_SELECTOR, "pre > code")
    assert code.text == "print('<b>hi</b>')" and code.get_attribute("data-lang") == "python"
    assert "monospace" in driver.execute_script("return getComputedStyle(arguments[0]).fontFamily", code).lower()
    for tag in ("script", "img", "b", "iframe"):
        assert content.find_elements(By.TAG_NAME, tag) == [], tag
    assert driver.execute_script("return window.pwned") is None
    assert "<script>window.pwned = 1</script>" in content.text and "onerror" in content.text
    assert [s.text for s in content.find_elements(By.TAG_NAME, "strong")] == ["bold"]
    assert [c.text for c in content.find_elements(By.CSS_SELECTOR, "p code")] == ["x < y"]
    links = content.find_elements(By.TAG_NAME, "a")
    assert [(a.text, a.get_attribute("href")) for a in links] == [("good", "https://example.com/a")]
    assert "[bad](javascript:window.pwned=3)" in content.text
    assert [li.text for li in content.find_elements(By.CSS_SELECTOR, "ul > li")] == ["one", "two"]


def test_conversations_are_kept_listed_and_switched(driver: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By
    open_page(driver, page_url, replies=["first answer", "second answer"])
    send(driver, "first question")
    driver.find_element(By.ID, "new-chat").click()
    assert driver.find_elements(By.CSS_SELECTOR, ".msg") == []
    send(driver, "second question")
    titles = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".conversation .title")]
    assert titles == ["second question", "first question"]
    # the second request carried only its own conversation
    assert [m["content"] for m in calls(driver, "/v1/chat/completions")[-1]["body"]["messages"]] == ["second question"]
    driver.refresh()
    wait_for(lambda: driver.execute_script("return state.ready"), "the page to connect again")
    assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".conversation .title")] == titles
    assert [m.text.splitlines()[0] for m in driver.find_elements(By.CSS_SELECTOR, ".msg")] == \
        ["second question", "second answer"]  # the current conversation came back
    driver.find_elements(By.CSS_SELECTOR, ".conversation")[1].click()
    assert [m.text.splitlines()[0] for m in driver.find_elements(By.CSS_SELECTOR, ".msg")] == \
        ["first question", "first answer"]
    assert driver.execute_script("return state.history.map((m) => m.content)") == ["first question", "first answer"]
    driver.find_elements(By.CSS_SELECTOR, ".conversation .delete")[1].click()  # the current one: the other opens
    assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".conversation .title")] == ["second question"]
    assert [m.text.splitlines()[0] for m in driver.find_elements(By.CSS_SELECTOR, ".msg")] == \
        ["second question", "second answer"]
    stored = json.loads(driver.execute_script("return localStorage.getItem('tg-chat-conversations')"))
    assert [c["title"] for c in stored] == ["second question"]


def test_copy_and_regenerate(driver: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By
    permissions = ["clipboardReadWrite", "clipboardSanitizedWrite"]
    driver.execute_cdp_cmd("Browser.grantPermissions", {"permissions": permissions, "origin": page_url.rstrip("/")})
    open_page(driver, page_url, replies=["alpha **one**", "beta"])
    reply = send(driver, "a question")
    reply.find_element(By.CSS_SELECTOR, "button.copy").click()
    wait_for(lambda: reply.find_element(By.CSS_SELECTOR, "button.copy").text == "Copied", "the copy")
    copied = driver.execute_async_script("navigator.clipboard.readText().then(arguments[0], () => arguments[0](null))")
    assert copied == "alpha **one**"  # the reply as written, markdown included
    reply.find_element(By.CSS_SELECTOR, "button.regenerate").click()
    wait_for(lambda: driver.execute_script("return localStorage.getItem('fake-replied')") == "2", "the second request")
    bubbles = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    wait_for(lambda: bubbles[-1].get_attribute("data-done"), "the new reply")
    bubbles = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    assert len(bubbles) == 1 and bubbles[0].find_element(By.CLASS_NAME, "content").text == "beta"
    assert [m["content"] for m in calls(driver, "/v1/chat/completions")[-1]["body"]["messages"]] == ["a question"]
    assert driver.execute_script("return state.history.map((m) => m.content)") == ["a question", "beta"]


def test_unreachable_server_is_shown_and_recovers(driver: Any, page_url: str) -> None:
    open_page(driver, page_url)
    driver.execute_script("localStorage.setItem('fake', JSON.stringify({down: true}))")
    wait_for(lambda: status(driver) == "server unreachable", "the unreachable status", timeout=15)
    driver.execute_script("localStorage.setItem('fake', '{}')")
    wait_for(lambda: status(driver) == "ready", "the recovery", timeout=15)


def test_a_wrong_api_key_says_so(driver: Any, page_url: str) -> None:
    open_page(driver, page_url, needKey="right-key")  # the prompt is cancelled: no key to try
    driver.execute_script("localStorage.setItem('tg-llm-api-key', 'wrong-key'); location.reload()")
    wait_for(lambda: status(driver) == "wrong API key", "the wrong-key status")
    assert driver.execute_script("return localStorage.getItem('tg-llm-api-key')") is None  # the wrong key is dropped
    driver.execute_script("localStorage.setItem('fake', JSON.stringify({needKey: 'right-key', key: 'right-key'}));"
                          "localStorage.setItem('tg-llm-api-key', 'wrong-key'); location.reload()")
    wait_for(lambda: driver.execute_script("return state.ready"), "the page to connect with the right key")
    assert driver.execute_script("return localStorage.getItem('tg-llm-api-key')") == "right-key"
    assert calls(driver, "/v1/models")[-1]["auth"] == "Bearer right-key"


def test_the_page_loads_nothing_from_elsewhere() -> None:
    assert re.search(r"<link[^>]+rel=\"icon\"[^>]+href=\"data:image/svg\+xml", PAGE)
    without_svg_namespace = PAGE.replace("http://www.w3.org/2000/svg", "")
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", without_svg_namespace)
    assert "@import" not in PAGE
