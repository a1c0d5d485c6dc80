"""The web chat page (GET /) in a real headless Chromium (Debian's `chromium` and
`chromium-driver`), driven by Selenium: a question streams an answer, Stop cancels it, and a
max-tokens limit ends the next answer with "length"; markdown is rendered and never run;
conversations survive a reload and can be switched, renamed, deleted and regenerated. Leaves
screenshots in tests/e2e/artifacts/ (not committed; docs/screenshots/ has the README's).

The CPU backend on a shared machine is slow: the waits are generous."""
import pathlib
import signal
import shutil
import time

import pytest

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ARTIFACTS = pathlib.Path(__file__).resolve().parent / "artifacts"


def find_binary(*names):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture
def browser():
    chromium = find_binary("chromium", "chromium-browser")
    driver_path = find_binary("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def running_on(server):
    """The server's running requests, from /metrics."""
    import requests
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("troupe:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("troupe:num_requests_running is not in /metrics")


def set_field(driver, element_id, value):
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(str(value))


def assistant_bubbles(driver):
    return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def answer_text(driver, bubble):
    """The streamed answer as the model wrote it (the page renders it as markdown)."""
    return driver.execute_script("return arguments[0].dataset.text || '';", bubble)


def ask(driver, question):
    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(question)
    driver.find_element(By.ID, "send").click()


def finish_reason(driver, bubble, timeout):
    meta = WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: bubble.find_elements(By.CSS_SELECTOR, ".meta"))[0]
    return meta.get_attribute("data-finish-reason"), meta.text


def test_chat_page_streams_stops_and_limits(server, browser):
    browser.get(server.base_url + "/")
    assert browser.title == "troupe chat"
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "status").text == "connected")
    wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())

    # A long answer: watch it stream (the text grows), then stop it.
    set_field(browser, "temperature", 0)
    set_field(browser, "max_tokens", 2000)
    ask(browser, "Write a long story about a lighthouse keeper and his cat.")
    bubble = wait.until(lambda d: assistant_bubbles(d))[0]
    first = WebDriverWait(browser, 120, poll_frequency=0.1).until(lambda d: answer_text(d, bubble))
    grown = WebDriverWait(browser, 120, poll_frequency=0.1).until(
        lambda d: (lambda t: t if len(t) > len(first) else None)(answer_text(d, bubble)))
    assert grown.startswith(first)
    assert browser.find_element(By.ID, "stop").is_enabled()
    assert not browser.find_element(By.ID, "send").is_enabled()
    browser.find_element(By.ID, "stop").click()
    reason, meta_text = finish_reason(browser, bubble, timeout=120)
    assert reason == "cancelled", meta_text
    assert "tokens/s" in meta_text and "first token" in meta_text
    # The server stopped computing it, not just the page (its stats catch up within a step).
    WebDriverWait(browser, 30, poll_frequency=0.2).until(lambda d: running_on(server) == 0)
    stopped_text = answer_text(browser, bubble)
    assert stopped_text.startswith(grown)
    assert not browser.find_element(By.ID, "stop").is_enabled()

    # A second question with max tokens 5 ends with "length".
    set_field(browser, "max_tokens", 5)
    ask(browser, "Now tell me about the sea.")
    wait.until(lambda d: len(assistant_bubbles(d)) == 2)
    second = assistant_bubbles(browser)[1]
    reason, meta_text = finish_reason(browser, second, timeout=180)
    assert reason == "length", meta_text
    assert "5 tokens" in meta_text
    assert answer_text(browser, second)
    assert answer_text(browser, bubble) == stopped_text  # the first answer is left as it was
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2
    assert browser.find_element(By.ID, "send").is_enabled()

    ARTIFACTS.mkdir(exist_ok=True)
    time.sleep(0.2)  # let the last layout settle
    assert browser.save_screenshot(str(ARTIFACTS / "web_page.png"))


def test_chat_page_ends_an_answer_when_the_socket_is_lost(start_server, browser):
    server = start_server().wait_ready()
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())
    set_field(browser, "max_tokens", 2000)
    ask(browser, "Write a long story about a lighthouse.")
    bubble = wait.until(lambda d: assistant_bubbles(d))[0]
    WebDriverWait(browser, 120, poll_frequency=0.1).until(lambda d: answer_text(d, bubble))
    server.stop(sig=signal.SIGKILL)
    meta = WebDriverWait(browser, 60, poll_frequency=0.2).until(
        lambda d: bubble.find_elements(By.CSS_SELECTOR, ".meta.error"))[0]
    assert "connection lost" in meta.text
    assert not browser.find_element(By.ID, "stop").is_enabled()
    assert "disconnected" in browser.find_element(By.ID, "status").text


def test_chat_page_asks_for_the_key_of_a_keyed_server(start_server, browser):
    key = "sk-troupe-web-5e1f0c"
    server = start_server("--api-key", key).wait_ready()
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "api-key").is_displayed())
    assert "API key needed" in browser.find_element(By.ID, "status").text
    assert not browser.find_element(By.ID, "send").is_enabled()

    # A wrong key is refused and asked for again.
    set_field(browser, "api-key", "sk-wrong")
    browser.find_element(By.ID, "key-submit").click()
    wait.until(lambda d: "refused" in d.find_element(By.ID, "key-message").text
               and d.find_element(By.ID, "api-key").is_displayed())

    set_field(browser, "api-key", key)
    browser.find_element(By.ID, "key-submit").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "connected")
    assert not browser.find_element(By.ID, "api-key").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('troupe.api_key')") == key
    set_field(browser, "max_tokens", 4)
    ask(browser, "Say hello.")
    bubble = wait.until(lambda d: assistant_bubbles(d))[0]
    reason, meta_text = finish_reason(browser, bubble, timeout=180)
    assert reason in ("length", "stop"), meta_text

    # A reload in the same tab keeps the key: no second question.
    browser.refresh()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "connected")
    assert not browser.find_element(By.ID, "api-key").is_displayed()
    log = server.read_log()
    assert key not in log and "sk-wrong" not in log
    assert "ws /v1/chat/ws" in log and "key=key-1" in log


MARKDOWN = ("# Title\n**bold** and *it* and `x<y`\n\n- one\n- two\n\n1. first\n"
            "[site](https://example.com) [bad](javascript:alert(1))\n"
            "<img src=x onerror=\"window.pwned=1\">\n```python\nprint('<b>')\n```\ntail")


def test_markdown_is_rendered_and_never_run(server, browser):
    browser.get(server.base_url + "/")
    html = browser.execute_script("return window.troupeMarkdown(arguments[0]);", MARKDOWN)
    assert "<h3>Title</h3>" in html
    assert "<strong>bold</strong>" in html and "<em>it</em>" in html
    assert "<code>x&lt;y</code>" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html and "<ol><li>first</li></ol>" in html
    assert '<a href="https://example.com" target="_blank" rel="noopener noreferrer">site</a>' in html
    assert "javascript:" not in html.split("[bad]")[0] and 'href="javascript' not in html
    assert "&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;" in html and "<img" not in html
    assert '<pre><code>print(&#39;&lt;b&gt;&#39;)</code></pre>' in html and 'class="copy"' in html
    # Rendered into the page, the image stays text and runs nothing.
    browser.execute_script("const d = document.createElement('div'); d.innerHTML = arguments[0];"
                           "document.body.appendChild(d);", html)
    assert browser.execute_script("return window.pwned === undefined;")


def conversation_titles(driver):
    return [b.text for b in driver.find_elements(By.CSS_SELECTOR, "#conversations .open")]


def ask_and_finish(driver, question, timeout=180):
    count = len(assistant_bubbles(driver))
    ask(driver, question)
    WebDriverWait(driver, 60, poll_frequency=0.2).until(lambda d: len(assistant_bubbles(d)) > count)
    return finish_reason(driver, assistant_bubbles(driver)[-1], timeout)


def test_conversations_are_kept_switched_renamed_regenerated_and_deleted(server, browser):
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())
    assert "SmolLM2" in browser.find_element(By.ID, "model").text
    set_field(browser, "temperature", 0)
    set_field(browser, "max_tokens", 6)
    # Three turns in the first conversation, with a system prompt.
    browser.find_element(By.ID, "system-toggle").click()
    set_field(browser, "system", "You are terse.")
    for question in ("Name a colour.", "Name another.", "And a third?"):
        assert ask_and_finish(browser, question)[0] in ("length", "stop")
    first_answers = [answer_text(browser, b) for b in assistant_bubbles(browser)]
    assert len(first_answers) == 3 and all(first_answers)
    assert conversation_titles(browser) == ["Name a colour."]

    # A second conversation; a reload keeps both and reopens the current one.
    browser.find_element(By.ID, "new-chat").click()
    wait.until(lambda d: not assistant_bubbles(d))
    ask_and_finish(browser, "Say hello.")
    browser.refresh()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "connected")
    assert conversation_titles(browser) == ["Say hello.", "Name a colour."]
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".msg.user")] == ["Say hello."]
    browser.find_elements(By.CSS_SELECTOR, "#conversations .open")[1].click()
    wait.until(lambda d: len(assistant_bubbles(d)) == 3)
    assert [answer_text(browser, b) for b in assistant_bubbles(browser)] == first_answers
    assert browser.find_element(By.ID, "system").get_attribute("value") == "You are terse."
    assert "tokens/s" in assistant_bubbles(browser)[-1].find_element(By.CSS_SELECTOR, ".meta").text

    # Regenerate the last answer: greedy, so the same text comes back in its place.
    assistant_bubbles(browser)[-1].find_element(By.CSS_SELECTOR, ".regenerate").click()
    reason, _ = finish_reason(browser, assistant_bubbles(browser)[-1], 180)
    assert len(assistant_bubbles(browser)) == 3
    assert answer_text(browser, assistant_bubbles(browser)[-1]) == first_answers[-1]

    # Rename, then delete the other conversation.
    item = browser.find_elements(By.CSS_SELECTOR, "#conversations li")[1]
    item.find_element(By.CSS_SELECTOR, ".rename").click()
    field = browser.find_element(By.CSS_SELECTOR, "#conversations .rename-field")
    field.send_keys("Colours\n")  # the old title is selected: typing replaces it
    wait.until(lambda d: "Colours" in conversation_titles(d))
    browser.find_elements(By.CSS_SELECTOR, "#conversations li")[0].find_element(By.CSS_SELECTOR, ".delete").click()
    wait.until(lambda d: conversation_titles(d) == ["Colours"])
    browser.refresh()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "connected")
    assert conversation_titles(browser) == ["Colours"]
    assert len(assistant_bubbles(browser)) == 3

    assert browser.find_element(By.ID, "max_tokens").get_attribute("value") == "6"  # kept too


def test_a_three_turn_conversation_renders_markdown_and_a_code_block(server, browser):
    """Greedy SmolLM2 answers the third turn with a fenced Python block and inline code."""
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())
    set_field(browser, "temperature", 0)
    for question, max_tokens in (("Hi!", 12), ("What is Python?", 24),
                                 ("Write a Python function that adds two numbers. Use a code block.", 120)):
        set_field(browser, "max_tokens", max_tokens)
        assert ask_and_finish(browser, question)
    assert len(assistant_bubbles(browser)) == 3
    answer = assistant_bubbles(browser)[-1]
    code = answer.find_element(By.CSS_SELECTOR, ".code pre code")
    assert code.text.startswith("def add_two_numbers(num1, num2):"), code.text
    assert answer.find_element(By.CSS_SELECTOR, ".code-bar").text.startswith("python")
    assert "```" not in answer.find_element(By.CSS_SELECTOR, ".content").text
    assert answer.find_elements(By.CSS_SELECTOR, ".content p code")  # the inline `add`
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "chat_desktop.png"))
    browser.set_window_size(390, 844)
    time.sleep(0.2)  # let the narrow layout settle before the picture
    assert browser.save_screenshot(str(ARTIFACTS / "chat_phone.png"))
    assert not browser.find_element(By.ID, "sidebar").is_displayed()
    browser.find_element(By.ID, "toggle-sidebar").click()
    assert browser.find_element(By.ID, "sidebar").is_displayed()
