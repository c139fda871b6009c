"""Drafting as the launcher starts it: SGLang's parser takes the plugin's flags, and a draft server
process starts and stops with the deployment."""

import pytest

from seer_sglang.config import DraftConfig
from seer_sglang.launch.drafting import start_drafting


def test_launcher_accepts_the_plugins_own_sglang_flags(tiny_model):
    """The launcher checks SGLang flags before starting anything; the plugin's backends and algorithm
    pass that check, a name SGLang does not know still fails there."""
    from seer_sglang.launch.deployment import validate_sglang_args

    for flags in (["--attention-backend", "seer_cascade"], ["--attention-backend", "seer_verify"],
                  ["--speculative-algorithm", "SEER"]):
        validate_sglang_args(tiny_model, flags)
    with pytest.raises(SystemExit):
        validate_sglang_args(tiny_model, ["--attention-backend", "seer_nonexistent"])


def test_draft_server_starts_and_stops(tmp_path):
    from seer_sglang.draft_server.client import wait_ready

    drafts = start_drafting(DraftConfig(drafter="group-suffix", draft_tokens=8, draft_paths=4), tmp_path, cpu=True,
                            with_plugin=True)
    try:
        assert drafts.enabled and drafts.address.startswith("tcp://127.0.0.1:")
        wait_ready(drafts.address, timeout_s=5)
    finally:
        drafts.stop()
    assert all(p.poll() is not None for p in drafts.processes)
