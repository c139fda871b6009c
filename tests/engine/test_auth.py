"""``--api-key`` and ``--admin-api-key`` as in SGLang: the frontend checks them, the instances get
them, and the frontend's own calls to the instances carry them."""

from __future__ import annotations

import httpx
import pytest

from conftest import running_seer

API_KEY, ADMIN_KEY = "sk-rollout-test", "sk-admin-test"


@pytest.fixture(scope="module")
def keyed(tiny_model, tmp_path_factory):
    with running_seer(tiny_model, tmp_path_factory.mktemp("auth"), "--num-instances", "1", "--api-key", API_KEY,
                      "--admin-api-key", ADMIN_KEY) as server:
        yield server


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_generation_needs_the_api_key(keyed):
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}
    assert httpx.post(f"{keyed.url}/generate", json=body, timeout=60).status_code == 401
    assert httpx.post(f"{keyed.url}/generate", json=body, headers=_auth("wrong"), timeout=60).status_code == 401
    ok = httpx.post(f"{keyed.url}/generate", json=body, headers=_auth(API_KEY), timeout=120)
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 4
    chat = httpx.post(f"{keyed.url}/v1/chat/completions", headers=_auth(API_KEY), timeout=120,
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert chat.status_code == 200
    assert httpx.post(f"{keyed.url}/v1/rollout", json={"prompts": ["hi"], "max_tokens": 2},
                      timeout=60).status_code == 401


def test_admin_routes_need_the_admin_key(keyed):
    assert httpx.get(f"{keyed.url}/flush_cache", headers=_auth(API_KEY), timeout=60).status_code == 401
    assert httpx.post(f"{keyed.url}/pause_generation", headers=_auth(API_KEY), timeout=60).status_code == 401
    flushed = httpx.get(f"{keyed.url}/flush_cache", headers=_auth(ADMIN_KEY), timeout=60)
    assert flushed.status_code == 200, flushed.text  # the frontend's admin call to the instance carried the key


def test_probes_stay_open_and_instances_are_keyed(keyed):
    assert httpx.get(f"{keyed.url}/health", timeout=30).status_code == 200
    assert httpx.get(f"{keyed.url}/metrics", timeout=30).status_code == 200
    instance = httpx.get(f"{keyed.url}/instances", headers=_auth(API_KEY), timeout=30).json()["instances"][0]
    assert instance["healthy"]  # the frontend's load polls carry the key
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
    assert httpx.post(f"{instance['url']}/generate", json=body, timeout=60).status_code == 401
    assert httpx.post(f"{instance['url']}/generate", json=body, headers=_auth(API_KEY), timeout=60).status_code == 200


def test_server_info_carries_no_key_and_needs_the_admin_key(keyed):
    assert httpx.get(f"{keyed.url}/server_info", timeout=30).status_code == 401
    assert httpx.get(f"{keyed.url}/server_info", headers=_auth(API_KEY), timeout=30).status_code == 401
    for path in ("/server_info", "/get_server_info"):
        r = httpx.get(f"{keyed.url}{path}", headers=_auth(ADMIN_KEY), timeout=60)
        assert r.status_code == 200, r.text
        assert API_KEY not in r.text and ADMIN_KEY not in r.text
        info = r.json()
        assert info["api_key"] is None and info["admin_api_key"] is None and info["seer"]["num_instances"] == 1
    # an error an instance gives back carries no key either
    bad = httpx.post(f"{keyed.url}/generate", headers=_auth(API_KEY), timeout=60,
                     json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": -1}})
    assert bad.status_code == 400 and API_KEY not in bad.text and ADMIN_KEY not in bad.text


def test_no_log_holds_a_key(keyed):
    """The launcher's, the draft server's and every instance's log (SGLang logs its server args)."""
    logs = [p for p in keyed.log_dir.rglob("*.log")]
    assert any(p.name.startswith("instance-") for p in logs), logs
    for path in logs:
        text = path.read_text(errors="replace")
        assert API_KEY not in text and ADMIN_KEY not in text, path
