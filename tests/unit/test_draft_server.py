"""Grouped draft server, in process: the store's offsets and tails, and a client without a server
drafting locally (the server as a process is tested in tests/engine/test_draft_server_process.py)."""

from __future__ import annotations

import time

from seer_sglang.launch.instances import free_port
from seer_sglang.draft_server.client import DraftClient
from seer_sglang.draft_server.server import DraftStore
from seer_sglang.draft_server.codec import pack_tokens, unpack_tokens


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---- the store, in process ----
def test_store_updates_by_offset_and_fetches_only_missing_tails():
    clock = FakeClock()
    store = DraftStore("group-suffix", default_ttl_s=10, clock=clock)
    store.register_group("g", 5.0, pack_tokens([1, 2, 3]))
    assert store.update("g", "a", 0, pack_tokens([10, 11, 12])) == 3
    assert store.update("g", "a", 1, pack_tokens([11, 12, 13])) == 4  # replay + one new token
    assert store.update("g", "a", 7, pack_tokens([99])) == 4  # gap: rejected
    assert store.update("g", "b", 0, pack_tokens([20])) == 1
    reply = store.fetch(["g", "nope"], {"g": {"v": -1, "prompt_len": 0, "counts": {"a": 2}}})
    assert reply["nope"] is None
    g = reply["g"]
    assert list(unpack_tokens(g["prompt"])) == [1, 2, 3]
    assert {rid: (start, list(unpack_tokens(data))) for rid, (start, data) in g["tails"].items()} == {
        "a": (2, [12, 13]), "b": (0, [20])}
    # nothing changed since that version: no tails, no prompt
    assert store.fetch(["g"], {"g": {"v": g["v"], "prompt_len": 3, "counts": {}}})["g"] == {"v": g["v"]}
    assert store.draft("g", "b", 4)[0] == []
    store.update("g", "b", 1, pack_tokens([10, 11]))
    assert store.draft("g", "b", 2)[0] == [12, 13]  # the server's own index drafts b from a
    clock.now = 4.0
    store.update("g", "a", 4, pack_tokens([14]))  # refreshes the TTL
    clock.now = 8.0
    assert store.expire() == []
    clock.now = 9.5
    assert store.expire() == ["g"] and store.stats()["expired"] == 1


def test_client_without_server_drafts_locally():
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with DraftClient(address, timeout_s=0.1) as c:
        c.update("g", "r", 0, [1, 2, 3, 4, 1, 2])
        assert c.draft("g", "r", 2).tokens == [3, 4]
        time.sleep(0.3)
        assert not c.connected and c.pending() == 6
    with DraftClient(None) as local:
        local.update("g", "r", 0, [1, 2, 3, 1])
        assert local.draft("g", "r", 2).tokens == [2, 3]
