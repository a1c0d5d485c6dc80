"""The dashboard (issue 43): GET /dashboard in headless Chromium and the JSON it polls. Its charts
move while a load runs, its table shows the live requests, and an admin key's cancel from the
table ends a request; a key without the keys file's `admin` column reads but may not cancel."""
import json
import threading

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from test_web_page import ARTIFACTS, browser, set_field  # noqa: F401 (the fixture)

MODEL_ID = "SmolLM2-135M-Instruct"
ADMIN, USER = "sk-dash-admin-1", "sk-dash-user-2"


@pytest.fixture
def keyed(start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"ops:{ADMIN} admin\nuser:{USER}\n")
    return start_server("--set", f"api.keys_file={keys}").wait_ready()


def long_stream(server, key, finished):
    """A long streamed chat; `finished` gets its finish_reason."""
    body = {"model": MODEL_ID, "stream": True, "max_tokens": 4000, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Tell me a very long story."}]}
    reason = None
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=600,
                      headers={"Authorization": f"Bearer {key}"}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                reason = choice.get("finish_reason") or reason
    finished.append(reason)


def test_the_dashboard_json_is_keyed_and_cancel_is_for_admins(keyed):
    assert httpx.get(keyed.base_url + "/v1/dashboard/stats", timeout=30).status_code == 401
    assert httpx.get(keyed.base_url + "/dashboard", timeout=30).status_code == 200  # the page is open
    user = {"Authorization": f"Bearer {USER}"}
    stats = httpx.get(keyed.base_url + "/v1/dashboard/stats", headers=user, timeout=30).json()
    assert stats["can_cancel"] is False and stats["stats"]["model"] == MODEL_ID
    assert {"running", "waiting"} <= stats["stats"]["requests"].keys()
    r = httpx.post(keyed.base_url + "/v1/dashboard/requests/1/cancel", headers=user, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "not_admin"
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert httpx.get(keyed.base_url + "/v1/dashboard/stats", headers=admin, timeout=30).json()["can_cancel"]
    r = httpx.post(keyed.base_url + "/v1/dashboard/requests/x/cancel", headers=admin, timeout=30)
    assert r.status_code == 400


def test_charts_move_and_an_admin_cancels_from_the_table(keyed, browser):
    browser.get(keyed.base_url + "/dashboard")
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    wait.until(lambda d: d.find_element(By.ID, "api-key").is_displayed())
    set_field(browser, "api-key", ADMIN)
    browser.find_element(By.ID, "key-submit").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "live")
    assert "SmolLM2" in browser.find_element(By.ID, "model").text

    finished = []
    stream = threading.Thread(target=long_stream, args=(keyed, USER, finished))
    stream.start()
    try:
        # The request shows in the table and on the charts (running 1, tokens/s above 0).
        row = WebDriverWait(browser, 120, poll_frequency=0.2).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#requests tr[data-id] button.cancel"))
        WebDriverWait(browser, 120, poll_frequency=0.2).until(
            lambda d: json.loads(d.find_element(By.ID, "chart-sequences").get_attribute("data-last"))[0] >= 1)
        WebDriverWait(browser, 120, poll_frequency=0.2).until(
            lambda d: json.loads(d.find_element(By.ID, "chart-tokens").get_attribute("data-last"))[0] > 0)
        assert int(browser.find_element(By.ID, "chart-kv").get_attribute("data-points")) >= 2
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "dashboard_desktop.png"))
        row[0].click()
        stream.join(timeout=120)
        assert finished == ["cancelled"] or finished == ["abort"], finished
    finally:
        stream.join(timeout=600)
    WebDriverWait(browser, 60, poll_frequency=0.2).until(
        lambda d: json.loads(d.find_element(By.ID, "chart-sequences").get_attribute("data-last"))[0] == 0)
    WebDriverWait(browser, 60, poll_frequency=0.2).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#requests td.empty"))
    browser.set_window_size(390, 844)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard_phone.png"))
