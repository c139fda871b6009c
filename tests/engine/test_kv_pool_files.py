"""The file KV pool as SGLang's page files make it, and the pool directory's lifetime with a launcher
process that is killed outright."""

from __future__ import annotations

import os

from seer_sglang.frontend.kv_pool import FilePool
from seer_sglang.launch.waiting import wait_until


def test_file_pool_finds_the_longest_stored_prefix_and_bounds_its_size(tmp_path):
    pool = FilePool(tmp_path, "org/model", page_size=4, size_gb=1.0)
    tokens = list(range(100, 130))  # 7 full pages + 2 tokens
    hashes = pool.page_hashes(tokens, "v1")
    assert len(hashes) == 7 and len(set(hashes)) == 7
    assert pool.pooled_tokens(tokens, "v1") == 0
    for h in hashes[:5]:
        (tmp_path / f"{h}_org-model_0_1.bin").write_bytes(b"x" * 1000)
    assert pool.pooled_tokens(tokens, "v1") == 20
    assert pool.pooled_tokens(tokens[:10], "v1") == 8
    assert pool.pooled_tokens([1, 2] + tokens, "v1") == 0  # another context: other hashes
    assert pool.pooled_tokens(tokens, "v2") == 0  # pages of other weights are other pages
    assert not set(pool.page_hashes(tokens, "v2")) & set(hashes)
    pool.max_bytes = 3500
    for i, h in enumerate(hashes[:5]):
        os.utime(tmp_path / f"{h}_org-model_0_1.bin", (1000 + i, 1000 + i))
    assert pool.enforce_bound() == 2  # oldest first, down to 90% of the bound
    assert pool.usage_bytes() == 3000
    assert pool.clear() == 3 and pool.usage_bytes() == 0


def test_file_pool_counts_a_page_once_every_tp_rank_wrote_its_shard(tmp_path):
    """TP 2: SGLang's HiCacheFile writes one file per rank and page (``_{model}_{rank}_{tp}``); an
    instance loads a page only when every rank finds its shard. An MLA model's latent is one file."""
    tokens = list(range(200, 216))  # 4 pages of 4
    pool = FilePool(tmp_path / "tp", "org/model", page_size=4, size_gb=1.0, tp_size=2)
    (tmp_path / "tp").mkdir()
    hashes = pool.page_hashes(tokens, "v1")
    for h in hashes[:3]:
        (tmp_path / "tp" / f"{h}_org-model_0_2.bin").write_bytes(b"x")
    assert pool.pooled_tokens(tokens, "v1") == 0  # rank 1's shards are missing
    for h in hashes[:2]:
        (tmp_path / "tp" / f"{h}_org-model_1_2.bin").write_bytes(b"x")
    assert pool.pooled_tokens(tokens, "v1") == 8
    mla = FilePool(tmp_path / "mla", "org/model", page_size=4, size_gb=1.0, tp_size=2, mla=True)
    (tmp_path / "mla").mkdir()
    for h in hashes:
        (tmp_path / "mla" / f"{h}_org-model.bin").write_bytes(b"x")
    assert mla.pooled_tokens(tokens, "v1") == 16


def test_a_tp_2_file_pool_is_probed_for_both_ranks(tmp_path, tiny_model):
    from seer_sglang.config import KVPoolConfig, SeerConfig
    from seer_sglang.launch.deployment import Deployment
    from seer_sglang.launch.kv_pool import start_kv_pool

    pool = start_kv_pool(KVPoolConfig(kind="file"), ["--tp-size", "2"], tmp_path, tiny_model, cpu=True, instances=2)
    try:
        assert (pool.setup.tp_size, pool.setup.mla) == (2, False)
        access = Deployment(SeerConfig(), tiny_model, [], pool=pool).pool_access()  # what the frontend gets
        assert [s[-8:] for s in access.file_pool.suffixes] == ["_0_2.bin", "_1_2.bin"]
    finally:
        pool.stop()


def test_the_pool_directory_goes_with_a_launcher_killed_outright(tmp_path):
    """The launcher's reaper removes the pool's directory when the launcher dies by SIGKILL."""
    import signal
    import subprocess
    import sys

    code = ("import sys, time; from pathlib import Path; from seer_sglang.launch.kv_pool import start_reaper; "
            "d = Path(sys.argv[1]); d.mkdir(); (d / 'page.bin').write_bytes(b'x'); "
            "start_reaper(d); print('ready', flush=True); time.sleep(60)")
    pool_dir = tmp_path / "kv-pool-x"
    launcher = subprocess.Popen([sys.executable, "-c", code, str(pool_dir)], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout.readline().strip() == "ready" and (pool_dir / "page.bin").exists()
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    wait_until(lambda: not pool_dir.exists(), 20, 0.1, "the pool directory removed by the reaper")
