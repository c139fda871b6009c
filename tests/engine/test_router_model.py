"""The simulator's model of sglang-router's ``cache_aware`` (``core.policy.CacheAwarePolicy``) places
requests as the real router does: the router runs in front of stand-in workers (no SGLang, no model), so
this checks the ``plain-router`` baseline's placement rule itself, not a rollout's timing."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang_router")

from benchmarks.router_probe import probe  # noqa: E402


def test_cache_aware_model_places_as_the_real_router(tmp_path):
    # a request that matches nothing goes to the instance with the fewest in flight: held open, they
    # alternate (the documented smallest-tree rule sends all but the first to the other instance);
    # answered at once, every count is 0 and all go to one; a shared chat template is more than 30% of
    # each text, so each question follows the first
    rows = probe(2, tmp_path, runs=[("texts that match nothing", True), ("a shared chat template", True),
                                    ("texts that match nothing", False)])
    for r in rows:
        assert r["model_agrees"], r
    assert not all(r["documented_rule_agrees"] for r in rows), rows
