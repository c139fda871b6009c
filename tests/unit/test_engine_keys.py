"""The in-process Engine's keys: SGLang takes only the API key on ordinary routes and only the admin
key on admin routes when both are set, so a client holding both must send the right one."""

from __future__ import annotations

import httpx

from seer_sglang.engine import _Keys

API, ADMIN = "k-api", "k-admin"


def _server(request: httpx.Request) -> httpx.Response:
    """SGLang's rule with both keys set: /generate wants the API key, /update_weights_from_disk the admin key."""
    want = ADMIN if request.url.path.startswith("/update") else API
    ok = request.headers.get("authorization") == f"Bearer {want}"
    return httpx.Response(200 if ok else 401, json={"body": request.content.decode()})


def _client(api, admin) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(_server), base_url="http://x", auth=_Keys(api, admin))


def test_both_keys_reach_both_kinds_of_route_with_the_body_intact():
    with _client(API, ADMIN) as http:
        assert http.post("/generate", json={"a": 1}).status_code == 200
        again = http.post("/update_weights_from_disk", json={"model_path": "m"})
        assert again.status_code == 200 and again.json()["body"] == '{"model_path":"m"}'


def test_one_key_is_sent_as_it_is_and_a_wrong_one_stays_refused():
    with _client(None, ADMIN) as http:
        assert http.post("/update_weights_from_disk", json={}).status_code == 200
    with _client(API, None) as http:
        assert http.post("/update_weights_from_disk", json={}).status_code == 401
