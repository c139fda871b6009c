"""The global KV pool's pure parts: flags, move cost, transfer scheduling, and the file pool's view."""

from __future__ import annotations

import json
import threading
import time

import pytest

from seer_sglang.launch.kv_pool import PoolSetup
from seer_sglang.core.migration import MigrationCost, choose_pool
from seer_sglang.launch.pool_choice import auto_pool, model_geometry
from seer_sglang.frontend.kv_pool import FilePool
from seer_sglang.core.transfer import TransferScheduler
from seer_sglang.plugin.transfer_gate import TransferGate
from seer_sglang.core.policy import ChunkedPolicy, InstanceView
from seer_sglang.core.request import ChunkRecord, Group, SamplingParams


def test_file_pool_flags_and_user_flags_win(tmp_path):
    cfg = PoolSetup(kind="file", directory=tmp_path, page_size=16)
    args = cfg.instance_args(["--page-size", "32"])
    assert "--enable-hierarchical-cache" in args
    assert args[args.index("--hicache-write-policy") + 1] == "write_through"
    assert "--page-size" not in args  # the user's own value stays
    extra = json.loads(args[args.index("--hicache-storage-backend-extra-config") + 1])
    assert extra["file_storage_path"] == str(tmp_path)
    assert PoolSetup(kind="none").instance_args([]) == []
    with pytest.raises(ValueError):
        PoolSetup(kind="redis")
    mc = PoolSetup(kind="mooncake", mooncake={"protocol": "tcp"}).instance_args([])
    assert mc[mc.index("--hicache-mem-layout") + 1] == "page_first_direct"


def test_move_cost_prefers_pool_loads_over_recompute():
    cost = MigrationCost(prefill_s_per_token=1e-3, load_s_per_token=1e-4, load_fixed_s=0.01, decode_s_per_token=0.02)
    assert cost.move_s(1000, 0) == pytest.approx(1.0)
    assert cost.move_s(1000, 992) == pytest.approx(0.01 + 0.0992 + 0.008)
    assert cost.saved_s(992) == pytest.approx(0.9 * 0.992 - 0.01)
    assert cost.overhead_share(1000, 100, 992) < cost.overhead_share(1000, 100, 0)
    assert cost.pooled(1000) == 992


def test_page_io_cost_is_paid_per_page_read_or_written():
    cost = MigrationCost(prefill_s_per_token=1e-3, load_s_per_token=0.0, load_fixed_s=0.0, page_io_s=2e-3, page_size=16)
    assert cost.load_s(1024) == pytest.approx(64 * 2e-3)
    assert cost.write_s(1030) == pytest.approx(64 * 2e-3)  # whole pages only
    assert cost.saved_s(1024) == pytest.approx(1.024 - 0.128)
    assert cost.saved_s(16) == pytest.approx(0.016 - 0.002)


def test_pool_choice_weighs_moves_against_what_a_sample_that_never_moves_pays():
    # A model that recomputes a page faster than a page file opens: off, whatever the page size.
    cheap = MigrationCost(prefill_s_per_token=3e-5, load_s_per_token=5e-7, page_io_s=1.4e-3)
    off = choose_pool(cheap, 2048, 0.5)
    assert not off.enabled and "over 5%" in off.reason
    # Milliseconds per token of prefill: on; larger pages read fewer files but waste more of each
    # shared prompt, and the choice lands in between.
    costly = MigrationCost(prefill_s_per_token=5e-3, load_s_per_token=2e-5, page_io_s=1.4e-3)
    on = choose_pool(costly, 4096, 0.5)
    assert on.enabled and 16 < on.page_size < 256 and on.net_s > 0
    assert on.net_s > max(choose_pool(costly, 4096, 0.5, (p,)).net_s for p in (16, 256))
    # Nothing ever moves (one instance): a pool only costs.
    assert not choose_pool(costly, 4096, 0.0).enabled
    # A page size of the user's is kept, and decides only on or off.
    assert choose_pool(costly, 4096, 0.5, (16,)).page_size == 16


def test_auto_pool_reads_the_model_folder(tiny_model):
    g = model_geometry(tiny_model, ["--dtype", "float32"])
    assert g.kv_bytes_per_token == 2 * 2 * 2 * 32 * 4  # layers x (K, V) x kv heads x head dim x fp32
    assert g.context_tokens == 4096 and 0.5e6 < g.params < 2e6
    assert model_geometry(tiny_model, []).kv_bytes_per_token == g.kv_bytes_per_token // 2  # stored bf16
    assert model_geometry(tiny_model, ["--context-length", "1024"]).context_tokens == 1024
    # The tiny model recomputes faster than a file pool loads: no pool by default, and why is said.
    choice = auto_pool(tiny_model, ["--dtype", "float32"], cpu=True, instances=2)
    assert not choice.enabled and "recompute" in choice.reason


def test_the_default_pool_is_auto_only_for_instances_started_with_the_plugin(tiny_model, tmp_path):
    from seer_sglang.config import KVPoolConfig
    from seer_sglang.launch.kv_pool import start_kv_pool

    started = start_kv_pool(KVPoolConfig(), ["--dtype", "float32"], tmp_path, tiny_model, cpu=True, instances=2)
    assert started.setup.kind == "none" and "recompute" in started.setup.reason  # the cost model said no
    bare = start_kv_pool(KVPoolConfig(), [], tmp_path, tiny_model, cpu=True, with_plugin=False, instances=2)
    assert bare.setup.kind == "none" and bare.setup.reason == ""
    attached = start_kv_pool(KVPoolConfig(), [], None, tiny_model, cpu=True)
    assert attached.setup.kind == "none"
    with pytest.raises(ValueError, match="auto"):
        start_kv_pool(KVPoolConfig(kind="auto"), [], None, tiny_model, cpu=True)


def test_policy_moves_a_long_context_only_when_the_pool_holds_it():
    """A continuation of 4,000 tokens on a loaded instance: without its KV in the pool, a modest
    imbalance is not worth a re-prefill; with it, the chunk goes to the idle instance."""
    policy = ChunkedPolicy(chunk_size=64, migration=MigrationCost(prefill_s_per_token=1e-3, load_s_per_token=5e-5,
                                                                  load_fixed_s=5e-3, decode_s_per_token=0.02))
    group = Group.make("g", list(range(100)), 1, SamplingParams(max_new_tokens=8000))
    sample = group.samples[0]
    sample.output_ids = [1] * 3900
    sample.chunks.append(ChunkRecord(instance=0, start=0.0, max_new_tokens=64))

    def choose(pool_tokens: int) -> int:
        sample.pool_tokens = pool_tokens
        views = [InstanceView(0, capacity_tokens=100_000, reserved_tokens=30_000, inflight=3),
                 InstanceView(1, capacity_tokens=100_000, reserved_tokens=0, inflight=0)]
        budget = 64
        return policy.select_instance(views, sample, budget, 0, policy.move_share(sample, budget)).index

    assert choose(0) == 0
    assert choose(4000) == 1


def test_transfer_scheduler_yields_with_a_bound():
    ts = TransferScheduler(starvation_steps=4, read_weight=2, write_weight=1)
    assert ts.decide("write", 0, decode_running=False).run
    assert not ts.decide("write", 3, decode_running=True).run
    assert ts.decide("write", 4, decode_running=True).reason == "starved"
    assert not ts.decide("read", 1, decode_running=True).run
    assert ts.decide("read", 2, decode_running=True).run
    assert ts.max_wait_steps("read") == 2 and ts.max_wait_steps("write") == 4


def test_transfer_gate_holds_a_piece_until_enough_decode_steps():
    gate = TransferGate(TransferScheduler(starvation_steps=3), max_wait_s=5.0)
    gate.decode_started()
    done = threading.Event()
    steps_seen = []

    def piece():
        gate.wait_turn("write")
        steps_seen.append(gate.steps)
        done.set()

    threading.Thread(target=piece).start()
    for _ in range(5):
        time.sleep(0.05)
        assert not done.is_set() or steps_seen[0] >= 3
        gate.decode_finished()
        gate.decode_started()
    assert done.wait(2.0)
    assert steps_seen[0] == 3 and gate.held["write"] == 1
    gate.decode_finished()


def test_mla_is_read_from_the_model_folder(tmp_path, tiny_model):
    import json

    from seer_sglang.launch.pool_choice import is_mla

    assert not is_mla(tiny_model)
    (tmp_path / "config.json").write_text(json.dumps({"kv_lora_rank": 512, "num_hidden_layers": 2}))
    assert is_mla(str(tmp_path)) and not is_mla(str(tmp_path / "absent"))


def test_router_probe_per_pool_kind(tmp_path):
    """A file pool is probed by its page files; a Mooncake store is taken as written through (whole
    pages); without a pool there is no probe, so every move is priced as a recompute."""
    from seer_sglang.frontend.kv_pool import PoolAccess

    access = PoolAccess.of("file", 16, tmp_path, "m", 1.0)
    assert access.probe() == access.file_pool.pooled_tokens
    assert PoolAccess.of("mooncake", 16).probe()(list(range(70)), "v1") == 64
    assert PoolAccess.of("mooncake", 32).probe()(list(range(70)), "v1") == 64
    assert PoolAccess.of("none", 16).probe() is None


def test_a_chunk_lost_with_its_instance_is_neither_a_hit_nor_a_recompute():
    """Only chunks an instance reported on count; the chunk after a lost one is a move from the
    last instance that reported."""
    from seer_sglang.core.accounting import chunk_sources, rollout_sources

    group = Group.make("g", list(range(100)), 1, SamplingParams(max_new_tokens=96))
    sample = group.samples[0]
    first = ChunkRecord(0, 0.0, 32, context_tokens=100, reported=True)
    lost = ChunkRecord(0, 1.0, 32, context_tokens=132)
    moved = ChunkRecord(1, 2.0, 32, context_tokens=132, cached_tokens=128, pool_tokens=128, reported=True)
    sample.chunks = [first, lost, moved]
    assert chunk_sources(lost) == {"device": 0, "host": 0, "pool": 0, "recomputed": 0}
    totals = rollout_sources([sample])
    assert totals["recomputed"] == 100 + 4 and totals["pool"] == 128
    assert totals["continuations"] == 1 and totals["moves"] == 1 and totals["reprefill_tokens"] == 4


def test_the_pool_directory_is_claimed_only_when_empty_or_already_the_pools(tmp_path):
    from seer_sglang.launch.kv_pool import claim_pool_dir
    from seer_sglang.wire import POOL_MARKER

    fresh = tmp_path / "fresh"
    claim_pool_dir(fresh)
    assert (fresh / POOL_MARKER).exists()
    claim_pool_dir(fresh)  # a directory a run made is taken again
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "weights.bin").write_bytes(b"not a KV page")
    with pytest.raises(ValueError, match="not a seer KV pool"):
        claim_pool_dir(foreign)
    assert not (foreign / POOL_MARKER).exists() and (foreign / "weights.bin").exists()


def test_the_janitor_touches_only_the_models_page_files(tmp_path):
    pool = FilePool(tmp_path, "org/model", page_size=16, size_gb=1e-9)
    page = tmp_path / ("ab" * 32 + "_org-model_0_1.bin")
    other_model = tmp_path / ("cd" * 32 + "_other_0_1.bin")
    foreign = [tmp_path / "checkpoint.bin", tmp_path / "notes_org-model_0_1.bin", other_model]
    for path in [page, *foreign]:
        path.write_bytes(b"x" * 64)
    assert pool.usage_bytes() == 64 and pool.enforce_bound() == 1
    assert not page.exists() and all(p.exists() for p in foreign)
    page.write_bytes(b"x" * 64)
    assert pool.clear() == 1 and all(p.exists() for p in foreign)


def test_an_idle_engine_drops_only_the_pages_nobody_wrote_for_as_long(tmp_path):
    """Once the engine has been idle ``idle_clear_s``, the janitor drops the pages written before then;
    a page written meanwhile (an instance answering a request sent to it directly, which the engine
    does not see) stays until it is as old. A busy engine keeps every page."""
    import asyncio
    import os
    import time

    from seer_sglang.frontend.kv_pool import janitor

    pool = FilePool(tmp_path, "org/model", page_size=16, size_gb=1.0)
    old, fresh = (tmp_path / (c * 64 + "_org-model_0_1.bin") for c in "ab")

    def write(path, age_s: float = 0.0) -> None:
        path.write_bytes(b"x" * 64)
        os.utime(path, (time.time() - age_s, time.time() - age_s))

    write(old, 100)
    write(fresh)
    assert pool.clear(written_before=time.time() - 60) == 1 and not old.exists() and fresh.exists()

    async def janitor_for(seconds: float, idle: bool, at: dict) -> None:
        """Run the janitor (idle_clear_s 2) for ``seconds``, calling ``at[t]`` at t seconds in."""
        task = asyncio.create_task(janitor(pool, lambda: idle, lambda *_: None, idle_clear_s=2.0, every_s=0.02))
        start = time.monotonic()
        try:
            for t, call in sorted(at.items()):
                await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                call()
            await asyncio.sleep(max(0.0, start + seconds - time.monotonic()))
        finally:
            task.cancel()

    write(old, 100)
    asyncio.run(janitor_for(2.75, idle=False, at={}))
    assert old.exists() and fresh.exists()  # busy: nothing goes

    fresh.unlink()
    asyncio.run(janitor_for(2.75, idle=True, at={0.3: lambda: old.exists() or pytest.fail("cleared before 2 s idle"),
                                                 1.5: lambda: write(fresh)}))
    assert not old.exists() and fresh.exists()  # the old page went at 2 s idle; the one written at 1.5 s stays

    write(fresh, 2.0)
    asyncio.run(janitor_for(2.75, idle=True, at={}))
    assert not fresh.exists()  # and goes once it is as old


def test_an_instance_is_restarted_with_a_doubling_backoff_up_to_its_limit():
    from seer_sglang.launch.supervisor import RestartPolicy

    policy = RestartPolicy(max_restarts=3, window_s=600.0, first_backoff_s=2.0)
    waits = []
    for now in (0.0, 10.0, 30.0):
        waits.append(policy.next_restart(0, now))
        policy.record(0, now)
    assert waits == [2.0, 4.0, 8.0]
    assert policy.next_restart(0, 40.0) is None  # three in ten minutes: it stays down
    assert policy.next_restart(1, 40.0) == 2.0  # counted per instance
    assert policy.next_restart(0, 620.0) == 4.0  # the window slid past the first two


def test_the_supervisor_holds_an_exited_instance_and_hands_back_the_restarted_one(monkeypatch):
    """The frontend hears of the exit before the restart, and of the restart once it is started."""
    import asyncio

    from seer_sglang.launch import instances
    from seer_sglang.launch.supervisor import RestartPolicy, Supervisor

    class Proc:
        def __init__(self):
            self.popen, self.spec, self.url = Popen(1), "spec", "http://127.0.0.1:1"

        def alive(self):
            return self.popen.returncode is None

        @property
        def pid(self):
            return 4242

    class Popen:
        def __init__(self, code):
            self.returncode = code

    events = []
    monkeypatch.setattr(instances, "start_instance",
                        lambda spec: events.append(("start", spec)) or type("P", (), {"popen": Popen(None)})())

    async def run():
        sup = Supervisor([Proc()], RestartPolicy(max_restarts=1, first_backoff_s=0.01), poll_s=0.01)
        sup.on_exit = lambda i: events.append(("exit", i))

        async def started(i):
            events.append(("started", i))

        sup.on_started = started
        task = asyncio.create_task(sup.run())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if ("started", 0) in events:
                break
        sup.procs[0].popen = Popen(-9)  # it dies again: one restart was all it had
        for _ in range(100):
            await asyncio.sleep(0.01)
            if sup.given_up:
                break
        task.cancel()
        return sup

    sup = asyncio.run(run())
    assert events[:3] == [("exit", 0), ("start", "spec"), ("started", 0)], events
    assert sup.status() == {"restarts": {"0": 1}, "restarting": [], "down_for_good": [0]}


@pytest.mark.parametrize("profile,length_scale,time_scale", [("h100-70b", 0.003125, 20.0), ("h100-70b-v2", 0.00625, 45.0),
                                                             ("moe-kimi-k2", 0.0013, 20.0), ("cpu-smollm2", 1.0, 1.0)])
def test_a_move_recomputes_at_the_price_of_the_instances_prefill_step(profile, length_scale, time_scale):
    """The router prices a re-prefill as the emulated instances run one (``StepModel.prefill``: fixed part,
    weight read, attention), so a short context costs a whole prefill step and a long one its square."""
    from seer_sglang.core.step_model import emulated_model, emulated_move_cost

    model = emulated_model(profile, length_scale, time_scale)
    cost = emulated_move_cost(profile, length_scale, time_scale)
    assert cost == model.migration_cost()
    for tokens in (1, 16, 300, 2000):
        assert cost.move_s(tokens) == pytest.approx(model.prefill(tokens), rel=1e-12)
    assert cost.move_s(0) == 0.0 and cost.decode_s_per_token == model.decode_step(1, 0)
    assert emulated_move_cost(None, 1.0, 1.0) is None


def test_fixed_move_costs_recompute_linearly_as_before():
    cost = MigrationCost(prefill_s_per_token=1e-3, load_s_per_token=1e-4, load_fixed_s=0.01)
    assert cost.move_s(700) == pytest.approx(0.7) and cost.saved_s(640) == pytest.approx(0.64 - cost.load_s(640))


def test_on_an_emulated_gpu_a_continuation_leaves_a_crowded_instance_for_an_idle_one():
    """A GPU's prefill of a short context costs a few decode steps, not the CPU-like 1 ms per token of the
    fixed defaults: on the profile's prices a continuation moves off an instance whose chunks claim 60%
    of its KV to an idle one, where the defaults keep it (a move looked like 70% of the chunk's time)."""
    from seer_sglang.core.step_model import emulated_move_cost

    group = Group.make("g", list(range(600)), 1, SamplingParams(max_new_tokens=128))
    sample = group.samples[0]
    sample.output_ids = [1] * 64
    sample.chunks.append(ChunkRecord(instance=0, start=0.0, max_new_tokens=16))

    def choose(migration) -> int:
        policy = ChunkedPolicy(chunk_size=16, migration=migration)
        views = [InstanceView(0, capacity_tokens=4062, reserved_tokens=2400, inflight=30, groups={"g": 1}),
                 InstanceView(1, capacity_tokens=4062, reserved_tokens=0, inflight=0)]
        return policy.select_instance(views, sample, 16, 0, policy.move_share(sample, 16)).index

    assert choose(None) == 0
    assert choose(emulated_move_cost("h100-70b", 0.003125, 20.0)) == 1
