"""An instance dies mid-rollout: its chunks move to the survivor, every sample completes with the
tokens of an undisturbed run, and the moved samples load their context from the global KV pool. An
instance that stops answering (SIGSTOP) has its chunks sent elsewhere, and takes work again once it
answers; so do an instance that answers errors and one restarted on its own port."""

import time
from pathlib import Path

import httpx
import psutil
import pytest

from conftest import BackgroundRollout, start_all_healthy, start_healthy, start_seer, stop_seer, wait_seer
from kill_rollout import MAX_TOKENS, PROMPTS, kill_mid_rollout
from seer_sglang.launch.waiting import wait_until


def _reference(plain_url: str, prompts: list[list[int]] = PROMPTS, max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    """Plain SGLang's greedy output of each prompt, unchunked."""
    with httpx.Client(timeout=600) as http:
        return [out["output_ids"] for out in http.post(f"{plain_url}/generate", json={
            "input_ids": prompts, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0,
                                                      "ignore_eos": True}}).json()]


def _assert_greedy(plain_url: str, prompt: list[int], got: list[int], ref: list[int], tie: float = 1e-4) -> None:
    """``got`` is plain SGLang's greedy output ``ref`` token for token. Where they part, the reference's
    two best tokens there must be within ``tie`` of each other in float32, and ``got`` must hold the
    runner-up: a near-tie that another batch composition decides the other way (seen: 2.6e-5 apart at
    token 184 of the random tiny model), after which the texts are free to differ. A lost, repeated or
    wrong token is none of that."""
    if got == ref:
        return
    at = next(i for i, (a, b) in enumerate(zip(got, ref)) if a != b)
    out = httpx.post(f"{plain_url}/generate", timeout=600, json={
        "input_ids": prompt + ref[:at], "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True, "top_logprobs_num": 2}).json()
    (best, first, _), (second, runner_up, _) = out["meta_info"]["output_top_logprobs"][0][:2]
    assert (first, runner_up) == (ref[at], got[at]) and best - second < tie, (at, got[at], ref[at], best, second)


def _wait_instances(url: str, ready, timeout_s: float = 300) -> list[dict]:
    def answer():
        inst = httpx.get(f"{url}/instances", timeout=10).json()["instances"]
        return inst if ready(inst) else None

    return wait_until(answer, timeout_s, 0.05, "the instances' state")


@pytest.fixture(scope="module")
def faulted(tiny_model, tmp_path_factory):
    """One deployment for the kill and the stop: 2 instances, the file pool, chunks of 32, and a stopped
    instance given up after 3 s without an answer. Every process it started is gone at the end."""
    server = start_seer(tiny_model, tmp_path_factory.mktemp("faulted"), "--num-instances", "2", "--dtype", "float32",
                        "--kv-pool", "file", "--scheduler", "context", "--chunk-size", "32", "--instance-down-s", "3")
    try:
        wait_seer(server)
        yield server
    finally:
        assert stop_seer(server) == []


def test_killing_one_of_two_instances_loses_no_sample(tiny_model, plain_url, faulted):
    server = faulted
    pool_dir = Path(httpx.get(f"{server.url}/kv_pool", timeout=10).json()["directory"])
    # the trainer's weights (the same files, under a version name): a restarted instance loads them again
    updated = httpx.post(f"{server.url}/update_weights_from_disk", timeout=300,
                         json={"model_path": tiny_model, "weight_version": "step-7"})
    assert updated.status_code == 200, updated.text
    result = kill_mid_rollout(server)
    samples = result.samples
    assert len(samples) == 24 and len({(s["prompt_index"], s["index"]) for s in samples}) == 24
    ref = _reference(plain_url)
    for s in samples:
        assert s["finish_reason"] == "length" and s["error"] is None
        assert len(s["output_ids"]) == MAX_TOKENS == len(s["logprobs"])  # nothing lost, nothing twice
        # resumed from the last completed chunk
        _assert_greedy(plain_url, PROMPTS[s["prompt_index"]], s["output_ids"], ref[s["prompt_index"]])
    assert result.moved, "no sample was moved off the killed instance"
    # Every finished chunk's pages were in the pool before its answer left the dead instance:
    # the moved samples load (almost) all of their context's whole pages instead of recomputing.
    print(f"moved {len(result.moved)} samples: {result.pool_pages} of {result.kv_pages} KV pages from the pool")
    assert result.pool_pages >= 0.9 * result.kv_pages, (result.pool_pages, result.kv_pages)
    # ... because each instance loaded the pool's page-hash extension while it started: built lazily,
    # its first lookup compiled it for longer than HiCache's prefetch deadline.
    for log in server.log_dir.glob("instance-*.log"):
        assert "KV pool: page-hash extension ready" in log.read_text(), log
    # The dead instance left no torn page in the global KV pool: every page file has one size.
    sizes = {f.stat().st_size for f in pool_dir.glob("*.bin")}
    assert len(sizes) == 1, sizes
    # The launcher starts the killed instance again on its port; it takes work again once it has
    # loaded the trainer's weights again.
    wait_until(lambda: httpx.get(f"{server.url}/health", timeout=10).json()["healthy_instances"] >= 2, 300, 0.5,
               "both instances healthy again")
    health = httpx.get(f"{server.url}/health").json()
    assert health["supervisor"]["restarts"] == {str(result.victim): 1} and not health["supervisor"]["held"], health
    versions = httpx.get(f"{server.url}/get_weight_version", timeout=30).json()
    assert versions["weight_version"] == "step-7", versions
    log = server.log_path.read_text()
    assert "restarting it in 2 s" in log and f"instance {result.victim} reloaded weights step-7" in log
    again = httpx.post(f"{server.url}/v1/rollout", timeout=600, json={
        "prompts": [{"input_ids": p} for p in PROMPTS[:4]], "n": 2, "max_tokens": 8, "temperature": 0})
    assert again.status_code == 200 and result.victim in again.json()["summary"]["instances_used"]


def test_a_stopped_instance_has_its_chunks_sent_elsewhere_and_rejoins(plain_url, faulted):
    from seer_sglang.benchmarking.kill import chunk_tokens_done, first_instance

    server = faulted
    stopped = []
    try:
        body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True}
        run = BackgroundRollout(server.url, body)
        _wait_instances(server.url, lambda inst: all(i["inflight_chunks"] for i in inst)
                        and chunk_tokens_done(server.url) >= 40 * len(PROMPTS))
        victim, index = first_instance(server.url, server.proc.pid)
        stopped = [victim] + victim.children(recursive=True)
        for p in stopped:  # hung, not dead: its connections stay open and never answer
            p.suspend()
        r = run.wait()
        assert r.status_code == 200, r.text
        samples = r.json()["samples"]
        ref = _reference(plain_url)
        assert len(samples) == 24
        for s in samples:
            assert s["finish_reason"] == "length" and s["output_ids"] == ref[s["prompt_index"]]
        assert "no answer for 3 s" in server.log_path.read_text()  # its chunks were given up, not waited on
        for p in stopped:
            p.resume()
        stopped = []
        _wait_instances(server.url, lambda inst: inst[index]["healthy"], timeout_s=120)  # answers again: readmitted
        # Stopped again, and an abort-all at once, before its polls have marked it down: the fan-out
        # answers within its control timeout and names the stuck instance; the other one aborted.
        stopped = [victim] + victim.children(recursive=True)
        for p in stopped:
            p.suspend()
        start = time.monotonic()
        r = httpx.post(f"{server.url}/abort_request", json={"abort_all": True}, timeout=60)
        took = time.monotonic() - start
        assert took < 20, took
        per_instance = {i["instance"]: i for i in r.json()["instances"]}
        assert per_instance[index]["status"] in (503, 504) and per_instance[1 - index]["status"] == 200, r.text
        assert r.status_code == (200 if per_instance[index].get("skipped") else 502), r.text
        for p in stopped:
            p.resume()
        stopped = []
        _wait_instances(server.url, lambda inst: inst[index]["healthy"], timeout_s=120)
    finally:
        for p in stopped:
            p.resume()


def test_an_erroring_instance_and_one_restarted_on_its_port_lose_no_sample(tiny_model, plain_url, tmp_path):
    """Instance A answers 500 to every chunk for a while (its load polls still answer), then instance B
    is killed and started again on the same port. Chunks go elsewhere and continue from their tokens;
    every sample is plain SGLang's, once; both instances take work again once they are well."""
    from fault_proxy import FaultProxy

    from seer_sglang.benchmarking.kill import kill_tree
    from seer_sglang.launch.instances import InstanceSpec, free_port, stop_instances

    def spec(name: str, port: int | None = None) -> InstanceSpec:
        return InstanceSpec(model_path=tiny_model, port=port or free_port(), sglang_args=["--dtype", "float32"],
                            log_path=tmp_path / f"{name}.log", cpu_threads=1)

    instances = start_all_healthy([spec("a"), spec("b")])  # side by side: their start-ups overlap
    try:
        with FaultProxy(instances[0].url) as proxy:
            server = start_seer(tiny_model, tmp_path / "seer", "--instance-urls", proxy.url, instances[1].url,
                                "--scheduler", "context", "--chunk-size", "32", "--instance-down-s", "3")
            try:
                wait_seer(server)
                body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS,
                        "temperature": 0, "ignore_eos": True}
                run = BackgroundRollout(server.url, body)
                _wait_instances(server.url, lambda inst: all(i["inflight_chunks"] for i in inst))
                proxy.failing = True  # A: every chunk sent to it fails, while its polls answer
                wait_until(lambda: proxy.refused >= 6, 60, 0.05, "six chunks refused")
                time.sleep(1.0)
                proxy.failing = False
                assert proxy.refused >= 6, proxy.refused
                forwarded = proxy.forwarded
                # B dies and a new process comes up on its port while the rollout runs on A
                port = instances[1].spec.port
                kill_tree(psutil.Process(instances[1].pid))
                instances[1].popen.wait(timeout=30)
                instances[1] = start_healthy(spec("b-again", port))
                r = run.wait()
                assert r.status_code == 200, r.text
                samples = r.json()["samples"]
                assert sorted(s["prompt_index"] for s in samples) == list(range(len(PROMPTS)))  # each once
                ref = _reference(plain_url)
                for s in samples:
                    assert s["finish_reason"] == "length" and s["error"] is None, s["error"]
                    assert len(s["output_ids"]) == MAX_TOKENS == len(s["logprobs"])
                    _assert_greedy(plain_url, PROMPTS[s["prompt_index"]], s["output_ids"], ref[s["prompt_index"]])
                assert proxy.forwarded > forwarded  # A took chunks again once it answered them
                # B is readmitted: a second rollout runs chunks on it
                _wait_instances(server.url, lambda inst: all(i["healthy"] for i in inst))
                again = httpx.post(f"{server.url}/v1/rollout", json={**body, "max_tokens": 64}, timeout=600)
                assert again.status_code == 200
                assert {c["instance"] for s in again.json()["samples"] for c in s["chunks"]} == {0, 1}
                for s in again.json()["samples"]:
                    _assert_greedy(plain_url, PROMPTS[s["prompt_index"]], s["output_ids"], ref[s["prompt_index"]][:64])
            finally:
                assert stop_seer(server) == []
    finally:
        stop_instances(instances)


@pytest.mark.last
def test_draft_server_killed_and_restarted_mid_rollout(servers, plain_url, request):
    """The shared server's draft server dies mid-rollout: drafting degrades to each instance's own
    replica, every token is unchanged (temperature 0, float32); a new draft server on the same address
    gets the instances' groups and tokens again."""
    import subprocess

    from seer_sglang.draft_server.client import call, wait_ready

    server = servers.seer
    drafts = [p for p in server.descendants() if "seer_sglang.draft_server" in " ".join(p.cmdline())]
    assert len(drafts) == 1, drafts
    cmdline, cwd = drafts[0].cmdline(), drafts[0].cwd()
    address = cmdline[cmdline.index("--bind") + 1]
    prompts = PROMPTS[:8]
    body = {"prompts": [{"input_ids": p} for p in prompts], "n": 2, "max_tokens": 160, "temperature": 0,
            "ignore_eos": True}
    ref = _reference(plain_url, prompts, 160)

    def same_as_plain(r: httpx.Response) -> None:
        assert r.status_code == 200, r.text
        samples = r.json()["samples"]
        assert sorted((s["prompt_index"], s["index"]) for s in samples) == [(i, k) for i in range(8) for k in range(2)]
        for s in samples:
            assert s["finish_reason"] == "length" and s["output_ids"] == ref[s["prompt_index"]]

    run = BackgroundRollout(server.url, body)
    _wait_instances(server.url, lambda inst: all(i["inflight_chunks"] for i in inst), timeout_s=120)
    drafts[0].kill()  # dead (a zombie until the launcher exits: nothing reaps it)
    while drafts[0].is_running() and drafts[0].status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    same_as_plain(run.wait())
    # A new draft server on the same address (what a supervisor would start)
    with open(server.log_dir / "draft-server-restarted.log", "ab") as log:
        again = subprocess.Popen(cmdline, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    request.config.add_cleanup(lambda: (again.terminate(), again.wait(timeout=30)))
    wait_ready(address, timeout_s=60)
    same_as_plain(httpx.post(f"{server.url}/v1/rollout", json=body, timeout=600))
    # The rollout can end (about a second here) before an instance's sync thread, backing off from the
    # dead server, calls again; the instances still hold the groups and push them with all their tokens.
    wait_until(lambda: (lambda stats: stats["groups"] >= len(prompts) and stats["tokens_in"] >= len(prompts) * 2 * 100)(
        call(address, "stats")), 30, 0.2, "every group's tokens pushed to the restarted draft server")
