"""Run inside a private network namespace by test_kv_pool_mooncake.py: print what every process under
the launcher listens on; start seer_sglang with ``--kv-pool mooncake`` on
2 instances, move a request from A to B, print what B loaded and whether the tokens match; then
update both instances' weights (no cache flush) and print what a continuation then loaded: nothing,
since every page is keyed by the weights that computed it; then kill one instance mid-rollout and
print how much of the moved samples' KV came from the store; then kill the Mooncake master and print
what a continuation then does (recompute, same tokens, answers not held up by the dead pool) and, with
a new master, whether the store serves again."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for conftest
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/engine/, for kill_rollout
from conftest import listening_under, start_seer, stop_seer, wait_seer  # noqa: E402
from kill_rollout import MAX_TOKENS, PROMPTS, kill_mid_rollout  # noqa: E402

from seer_sglang.models import prepare  # noqa: E402
from seer_sglang.launch.waiting import wait_until


def generate(url: str, ids: list[int], n: int) -> dict:
    r = httpx.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=300)
    r.raise_for_status()
    return r.json()


def stale_after_update(a: str, b: str) -> dict:
    """A's context is in the store; both instances then load new weights (straight at the instances,
    no cache flush). B's continuation must find none of the old pages in the store, and A none on its
    device; once B has written the new version's pages, A loads those."""
    prompt = [(53 * i) % 1500 + 30 for i in range(260)]
    context = prompt + generate(a, prompt, 48)["output_ids"]
    time.sleep(8.0)
    version = f"stale-check-{time.monotonic_ns()}"
    for url in (a, b):
        httpx.post(f"{url}/update_weights_from_disk", timeout=300, json={
            "model_path": str(prepare("tiny")), "weight_version": version, "flush_cache": False}).raise_for_status()
    moved = generate(b, context, 4)["meta_info"]
    time.sleep(8.0)
    again = generate(a, context, 4)["meta_info"]
    return {"context": len(context), "version": version, "moved_version": moved["weight_version"],
            "moved_cached": moved["cached_tokens"], "moved_details": moved.get("cached_tokens_details") or {},
            "again_cached": again["cached_tokens"], "again_details": again.get("cached_tokens_details") or {}}


def flush(url: str, timeout_s: float = 90.0) -> int:
    """Empty the instance's device and host cache; SGLang refuses while pool writes are in flight (with
    the master gone they fail only after Mooncake's own timeouts), so try again until it does.
    Returns the number of attempts."""
    attempts = []

    def flushed() -> bool:
        r = httpx.get(f"{url}/flush_cache", timeout=60)
        attempts.append(r.status_code)
        assert r.status_code in (200, 400), (r.status_code, r.text)
        return r.status_code == 200

    wait_until(flushed, timeout_s, 1.0, f"{url}/flush_cache accepted")
    return len(attempts)


def master_killed(server, url: str, ref: list[list[int]]) -> dict:
    """The Mooncake master dies: the instance stays healthy; the first answer waits the bound for its
    pool writes once, later ones do not; a continuation whose context is gone from the device
    recomputes it, with the same tokens; a chunked rollout through the frontend returns every sample
    once, with ``ref``'s tokens. Then a new master starts on the same address and a continuation
    loads its context from the store again."""
    import subprocess

    import psutil

    def cmdline(p: psutil.Process) -> list[str]:
        try:
            return p.cmdline()
        except psutil.Error:  # the instance killed earlier is a zombie until the launcher exits
            return []

    masters = [p for p in psutil.Process(server.proc.pid).children(recursive=True)
               if "mooncake_master" in " ".join(cmdline(p))]
    command, env = cmdline(masters[0]), masters[0].environ()  # its environment: Mooncake's private libraries
    for p in masters:
        p.kill()
    time.sleep(2.0)

    def timed(prompt: list[int], n: int) -> tuple[dict, float]:
        start = time.monotonic()
        out = generate(url, prompt, n)
        return out, time.monotonic() - start

    def move(seed: int) -> dict:
        prompt = [(41 * i + seed) % 1300 + 40 for i in range(260)]
        first, first_s = timed(prompt, 32)
        _, next_s = timed([(7 * i + seed) % 900 + 11 for i in range(40)], 4)
        time.sleep(4.0)
        flushes = flush(url)
        moved = generate(url, prompt + first["output_ids"], 32)
        unmoved = generate(url, prompt, 64)["output_ids"]
        return {"identical": first["output_ids"] + moved["output_ids"] == unmoved,
                "cached": moved["meta_info"]["cached_tokens"],
                "details": moved["meta_info"].get("cached_tokens_details") or {},
                "first_s": round(first_s, 3), "next_s": round(next_s, 3), "flush_attempts": flushes}

    down = move(1)
    start = time.monotonic()
    r = httpx.post(f"{server.url}/v1/rollout", timeout=600, json={
        "prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS, "temperature": 0,
        "ignore_eos": True})
    rollout_s = time.monotonic() - start
    samples = r.json()["samples"] if r.status_code == 200 else []
    rollout = {"status": r.status_code, "seconds": round(rollout_s, 2), "samples": len(samples),
               "prompts": sorted(s["prompt_index"] for s in samples),
               "chunks": sum(len(s.get("chunks", [])) for s in samples),
               "identical": [s["output_ids"] for s in sorted(samples, key=lambda s: s["prompt_index"])] == ref}
    healthy = httpx.get(f"{url}/health", timeout=30).status_code
    with open(server.log_dir / "mooncake-master-restarted.log", "ab") as log:
        again = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        time.sleep(10.0)
        back = move(2)
    finally:
        again.terminate()
        again.wait(timeout=30)
    return {"down": down, "rollout_while_down": rollout, "healthy_while_down": healthy, "back": back}


def mooncake_listeners(launcher_pid: int) -> dict:
    """What the launcher's Mooncake master and store service listen on ([address, port] by process),
    the store's REST API port (its ``--port``), and what every other process of the deployment (the
    launcher itself included) listens on."""
    listening = listening_under(launcher_pid)
    out: dict = {"others": []}
    for pid, ports in listening.items():
        cmdline = psutil.Process(pid).cmdline()
        cmd = " ".join(cmdline)
        name = "store" if "mooncake_store" in cmd else "master" if "mooncake_master" in cmd else None
        if name is None:  # the frontend and the instances' processes, whose store clients run transfer engines too
            out["others"] += ports
            continue
        out[name] = ports
        if name == "store":
            out["store_rest_port"] = int(next(a for a in cmdline if a.startswith("--port=")).split("=", 1)[1])
        else:  # which of the master's ports is which
            out["master_ports"] = {a.split("=")[0].lstrip("-"): int(a.split("=")[1]) for a in cmdline
                                   if a.startswith("--") and a.split("=")[0].endswith("_port")}
    return out


def main(log_dir: str) -> None:
    server = start_seer(str(prepare("tiny")), Path(log_dir), "--num-instances", "2", "--dtype", "float32",
                        "--kv-pool", "mooncake", "--kv-pool-size-gb", "1", "--scheduler", "context",
                        "--chunk-size", "32")
    try:
        wait_seer(server)
        print("BIND " + json.dumps(mooncake_listeners(server.proc.pid)), flush=True)
        a, b = [i["url"] for i in httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]]
        prompt = [(37 * i) % 900 + 5 for i in range(300)]
        first = generate(a, prompt, 64)["output_ids"]
        time.sleep(8.0)  # write-through reaches the store a few ms after A answers (seconds on a busy machine)
        moved = generate(b, prompt + first, 32)
        unmoved = generate(a, prompt, 96)["output_ids"]
        details = moved["meta_info"].get("cached_tokens_details") or {}
        print("RESULT " + json.dumps({"context": len(prompt) + len(first), "details": details,
                                      "identical": first + moved["output_ids"] == unmoved}), flush=True)
        print("STALE " + json.dumps(stale_after_update(a, b)), flush=True)
        kill = kill_mid_rollout(server)
        survivor = (a, b)[1 - kill.victim]  # the killed one is out of /instances while it restarts
        r = httpx.post(f"{survivor}/generate", timeout=600, json={"input_ids": PROMPTS, "sampling_params": {
            "max_new_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}})
        ref = [out["output_ids"] for out in r.json()]
        moved_prompts = {s["prompt_index"] for s in kill.moved}
        differ = [{"prompt": s["prompt_index"], "moved": s["prompt_index"] in moved_prompts,
                   "first_diff": next((i for i, (x, y) in enumerate(zip(s["output_ids"], ref[s["prompt_index"]]))
                                       if x != y), None),
                   "chunks": [(c.get("instance"), c.get("new_tokens"), c.get("kv")) for c in s.get("chunks", [])]}
                  for s in kill.samples if s["output_ids"] != ref[s["prompt_index"]]]
        print("KILL " + json.dumps({
            "samples": len(kill.samples), "moved": len(kill.moved), "kv_pages": kill.kv_pages,
            "pool_pages": kill.pool_pages, "victim": kill.victim, "identical": not differ,
            "differ": differ}), flush=True)
        print("MASTER " + json.dumps(master_killed(server, survivor, ref)), flush=True)
    finally:
        stop_seer(server)


if __name__ == "__main__":
    main(sys.argv[1])
