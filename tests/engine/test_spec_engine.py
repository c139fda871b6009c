"""Speculative decoding inside real SGLang servers on CPU (tiny model, float32).

One SGLang server at a time: plain SGLang (the reference), then ``SEER`` (the seer algorithm, drafting
through a draft server process), then SGLang's own ``NGRAM``; both speculative servers verify through
``seer_verify``. SEER's drafter is the draft server's client with scripted trees for some groups and a
record of what it holds; the SEER server imports it from this module. The test process plays a second
instance that already finished one sibling of some groups.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from conftest import STARTUP_TIMEOUT_S, running_seer, start_healthy
from seer_sglang.config import PluginConfig
from seer_sglang.kernels.sglang_layout import tree_attention, tree_masks, verify_slots
from seer_sglang.launch.instances import (InstanceProcess, InstanceSpec, free_port, has_cuda, start_instance,
                                            stop_instances, wait_healthy)
from seer_sglang.plugin.cpu_ops import copy_all_layer_kv_cache_cpu
from seer_sglang.speculative.draft import Draft
from seer_sglang.draft_server.client import DraftClient, call, wait_ready
from seer_sglang.draft_server.codec import unpack_tokens
from seer_sglang.plugin.spec_worker import request_key, response_tail, tree_layout

pytestmark = pytest.mark.skipif(has_cuda(), reason="checks the CPU engine's torch verify path")

PLAN_ENV = "SEER_TEST_SPEC_PLAN"
VOCAB = 2048  # the tiny model's
DRAFT_TOKENS = 8  # nodes per verify tree: the last verified token + 7 drafts
NEW_TOKENS = 20
SPEC_ARGS = ["--attention-backend", "seer_verify", "--speculative-num-draft-tokens", str(DRAFT_TOKENS),
             "--speculative-ngram-max-bfs-breadth", "4"]
N_SAMPLED = 4_000  # per draft shape (tree, chain)
SEEDED = dict(temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=NEW_TOKENS)
FORCED_LENGTHS = [3, 7, 12, 18]
# 8 groups x 4 seeded siblings; sibling 1 repeats sibling 0's seed, so once sibling 0 has finished it drafts
# exactly the tokens sibling 1 draws (at temperature 1 the other siblings' drafts rarely match).
SEEDS = [500 + 10 * g + (j if j > 1 else 0) for g in range(8) for j in range(4)]
T1_CANDIDATES = 6


def oracle_tree(ref: list[int], context: list[int], max_tokens: int) -> Draft:
    """A tree that is right only on its second branch: a wrong first child (with the true next-next token
    under it, which must not be accepted there), then the true path for 1..max_tokens-3 tokens, then a
    wrong token. The accepted length changes with the position."""
    pos = len(context)
    truth = ref[pos:pos + max_tokens]
    if context != ref[:pos] or not truth:
        return Draft()
    depth = 1 + pos % max(1, max_tokens - 3)
    tokens, parents = [(truth[0] + 1) % VOCAB], [-1]
    if len(truth) > 1:
        tokens.append(truth[1])
        parents.append(0)
    prev = -1
    for t in truth[:depth]:
        tokens.append(t)
        parents.append(prev)
        prev = len(tokens) - 1
    if len(truth) > depth:
        tokens.append((truth[depth] + 1) % VOCAB)
        parents.append(prev)
    n = min(max_tokens, len(tokens))
    return Draft(tokens[:n], parents[:n], [1.0] * n)


class ScriptedDrafter(DraftClient):
    """The client of the draft server (group-suffix replicas), plus scripted trees (``refs``: oracle trees;
    ``table``: siblings or a chain for a context) and a record of what it was fed (the group's prompt,
    the request's tokens and sibling 0's tokens after each update)."""

    def __init__(self, server_args=None):
        super().__init__(PluginConfig.from_env().draft_server, "group-suffix")
        self.plan_path = os.environ[PLAN_ENV]
        plan = json.loads(Path(self.plan_path).read_text())
        self.refs = plan["refs"]
        self.table = {tuple(ctx): (cands, shape) for ctx, cands, shape in plan["table"]}

    def update(self, group_id, request_id, prev_token_count, new_tokens):
        stored = super().update(group_id, request_id, prev_token_count, new_tokens)
        with self._lock:
            first = f"{group_id}-0"
            line = [group_id, list(self.drafter.prompt(group_id)), request_id,
                    list(self.drafter.tokens(group_id, request_id)),
                    list(self.drafter.tokens(group_id, first)) if first in self.drafter.counts(group_id) else None]
        with open(self.plan_path + ".seen.jsonl", "a") as f:  # appended: 20k samples per test
            f.write(json.dumps(line) + "\n")
        return stored

    def draft(self, group_id, request_id, max_tokens, max_paths=1, min_score=0.1):
        with self._lock:
            context = self.drafter.prompt(group_id) + self.drafter.tokens(group_id, request_id)
        if group_id in self.refs:
            return oracle_tree(self.refs[group_id], context, max_tokens)
        cands, shape = self.table.get(tuple(context), ((), ""))
        if cands:  # a tree: candidates as siblings; a chain: each under the one before
            parents = [-1] * len(cands) if shape == "tree" else list(range(-1, len(cands) - 1))
            return Draft(list(cands), parents, [1.0] * len(cands))
        return super().draft(group_id, request_id, max_tokens, max_paths, min_score)


# --- the pieces, without a server ---------------------------------------------------------------------

def _ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """[B, N, N]: node j is node i or an ancestor of it (parents -1: the root, or an unused node)."""
    b, n = parents.shape
    mask = torch.eye(n, dtype=torch.bool).expand(b, n, n).clone()
    for i in range(1, n):
        p = parents[:, i]
        mask[:, i] |= mask[torch.arange(b), p.clamp(min=0)] & (p >= 0)[:, None]
    return mask


RECONSTRUCT_CHECK = """
import os
os.environ["TRITON_INTERPRET"] = "1"
import json, sys, torch
from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_triton as sglang_op
from seer_sglang.plugin.cpu_ops import reconstruct_indices_from_tree_mask as torch_op
mask, seq = (torch.tensor(x) for x in json.loads(sys.stdin.read()))
bs, n = mask.shape[:2]
outs = []
for fn in (sglang_op, torch_op):
    out = [torch.full((bs * n,), -7), *(torch.full((bs, n), -7) for _ in range(3))]
    fn(mask.flatten(), seq, *out, bs, n)
    outs.append(out)
assert all(torch.equal(a, b) for a, b in zip(*outs)), outs
print("identical")
"""


def test_tree_links_match_sglang_kernel():
    """positions / retrive_* from a tree mask: the torch op equals SGLang's Triton kernel (interpreted)."""
    torch.manual_seed(0)
    parents = torch.stack([torch.randint(0, max(i, 1), (12,)) if i else torch.full((12,), -1) for i in range(9)], 1)
    parents[:3, 6:] = -1  # unused nodes see only themselves
    payload = json.dumps([_ancestor_mask(parents).tolist(), torch.randint(5, 50, (12,)).tolist()])
    out = subprocess.run([sys.executable, "-c", RECONSTRUCT_CHECK], input=payload, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("identical"), out.stderr[-3000:]


def test_tree_layout_keeps_valid_nodes_and_hides_the_rest():
    draft = Draft(tokens=[5, 6, 7, 8, 9], parents=[-1, 0, 3, -1, 0], scores=[1.0] * 5)  # node 2: parent after it
    tokens, mask, used = tree_layout(42, draft, 6)
    assert tokens.tolist() == [42, 5, 6, 8, 9, 42] and used == 5  # the used nodes first: the compacted verify runs them
    want = _ancestor_mask(torch.tensor([[-1, 0, 1, 0, 1, -1]]))[0]
    assert torch.equal(torch.from_numpy(mask), want)
    assert tree_layout(1, Draft(tokens=list(range(10)), parents=list(range(-1, 9)), scores=[1.0] * 10), 4)[0].tolist() \
        == [1, 0, 1, 2]


def test_tree_attention_equals_per_node_attention():
    torch.manual_seed(0)
    hq, hkv, hd, d = 4, 2, 8, 5
    k_cache, v_cache = torch.randn(200, hkv, hd), torch.randn(200, hkv, hd)
    req_to_token = torch.randint(1, 200, (4, 64), dtype=torch.int32)
    prefix, rows, locs = torch.tensor([7, 3, 12]), torch.tensor([2, 0, 3]), torch.randint(1, 200, (3, d))
    tree = _ancestor_mask(torch.tensor([[-1, 0, 0, 1, 2], [-1, 0, 1, 2, 3], [-1, 0, 0, 0, 0]]))
    q = torch.randn(3, d, hq, hd)
    out = tree_attention(q, k_cache, v_cache, verify_slots(req_to_token, rows, prefix, locs), prefix, tree, 0.3, True)
    for b in range(3):
        slots = torch.cat([req_to_token[rows[b], :prefix[b]].long(), locs[b]])
        keys, values = k_cache[slots].repeat_interleave(2, 1), v_cache[slots].repeat_interleave(2, 1)
        for i in range(d):
            seen = torch.cat([torch.ones(int(prefix[b]), dtype=torch.bool), tree[b, i]])
            att = (torch.einsum("hd,lhd->hl", q[b, i], keys[seen]) * 0.3).softmax(-1)
            assert torch.allclose(torch.einsum("hl,lhd->hd", att, values[seen]), out[b, i], atol=1e-5)
    # SGLang's GPU layout (rows over prefix + tree) gives the same tree masks as its CPU layout (tree only)
    full = torch.cat([torch.cat([torch.ones(d, int(p), dtype=torch.bool), t], 1).flatten() for p, t in zip(prefix, tree)])
    assert torch.equal(tree_masks(full, prefix.tolist(), d), tree)
    assert torch.equal(tree_masks(tree.flatten(), prefix.tolist(), d), tree)


def test_kv_row_move_reads_before_writing():
    bufs = [torch.randn(50, 2, 4) for _ in range(3)]
    want = [b.clone() for b in bufs]
    tgt, src = torch.tensor([10, 11, 12, 0, 0]), torch.tensor([10, 14, 17, 0, 0])
    copy_all_layer_kv_cache_cpu(torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64),
                                torch.tensor([b.stride(0) * b.element_size() for b in bufs]), tgt, src)
    for got, w in zip(bufs, want):
        w[tgt] = w[src].clone()
        assert torch.equal(got, w)


def test_router_rids_map_to_group_and_sample():
    assert request_key("grp-7-3-c2") == ("grp-7", "grp-7-3", 2)
    assert request_key("abc") == ("abc", "abc", 0)


def test_response_tail_equals_the_slice_of_the_whole_response():
    """The drafter is fed response[fed:] each step without building the whole response (prompt tail of a
    continuation chunk + output as SGLang's array + pending tokens)."""
    from array import array

    prompt, pending = list(range(100, 110)), [7, 8]
    for offset in (4, 10, 12):
        for output in (array("i"), array("i", [1, 2, 3])):
            for tail in ([], pending):
                whole = (prompt[offset:] if offset < len(prompt) else []) + list(output) + tail
                for start in range(len(whole) + 2):
                    assert response_tail(prompt, offset, output, tail, start) == whole[start:]


# --- real servers ---------------------------------------------------------------------------------------

def _spec(model: str, log_dir: Path, name: str, args: list[str], env: dict[str, str] | None = None,
          with_plugin: bool = True) -> InstanceSpec:
    # One torch thread: the model is tiny, and OpenMP threads waiting on a busy CPU slow each step ~40x.
    return InstanceSpec(model_path=model, port=free_port(), sglang_args=["--dtype", "float32", *args],
                        log_path=log_dir / f"{name}.log", with_plugin=with_plugin,
                        extra_env={"OMP_NUM_THREADS": "1", **(env or {})})


def _start(model: str, log_dir: Path, name: str, args: list[str], env: dict[str, str] | None = None,
           with_plugin: bool = True):
    return start_healthy(_spec(model, log_dir, name, args, env, with_plugin))


def _healthy(inst: InstanceProcess) -> InstanceProcess:
    wait_healthy([inst], timeout_s=STARTUP_TIMEOUT_S, progress=False)
    return inst


def _generate(url: str, input_ids: list[list[int]], rids: list[str] | None = None, seeds: list[int] | None = None,
              **params) -> list[dict]:
    extra = {k: params.pop(k) for k in ("return_logprob", "top_logprobs_num", "logprob_start_len",
                                        "custom_logit_processor") if k in params}
    sampling = params if seeds is None else [dict(params, sampling_seed=s) for s in seeds]
    body = {"input_ids": input_ids, "sampling_params": sampling, **extra}
    if rids is not None:
        body["rid"] = rids
    r = httpx.post(f"{url}/generate", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def _prompts(model: str, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    words = "the sum of product apples oranges answer step first then total each plus minus".split()
    texts = [f"{words[i % 14]} {words[(3 * i + 1) % 14]} {words[(5 * i + 2) % 14]} {i * 7} + {i + 3} ="
             for i in range(n)]
    return [tok(t)["input_ids"] for t in texts]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("spec")


def _eos(model: str) -> int:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model).eos_token_id


def _forced(model: str, prompt: list[int], length: int) -> dict:
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor, custom_params

    return {"custom_logit_processor": ForceLengthProcessor.to_str(),
            "custom_params": custom_params(len(prompt), length, _eos(model))}


def _replayed(model: str, prompt: list[int]) -> tuple[list[int], dict]:
    """A recorded output for ``prompt`` (tokens unlike anything the model writes, ending in EOS) and the
    params that make the model write it."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor, custom_params

    eos = _eos(model)
    rng = random.Random(len(prompt))
    tokens = [rng.randrange(3, 2000) for _ in range(NEW_TOKENS - 1)] + [eos]
    return tokens, {"custom_logit_processor": ForceLengthProcessor.to_str(),
                    "custom_params": custom_params(len(prompt), 0, eos, replay=tokens)}


def _forced_batch(url: str, model: str, prompts: list[list[int]], tag: str) -> list[dict]:
    """Prompts 0-7 in one greedy batch, each forced to end at FORCED_LENGTHS[i % 4] tokens."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor, custom_params

    eos = _eos(model)
    lengths = [FORCED_LENGTHS[i % len(FORCED_LENGTHS)] for i in range(8)]
    body = {"input_ids": prompts[:8], "rid": [f"{tag}{i}-0-c0" for i in range(8)],
            "custom_logit_processor": ForceLengthProcessor.to_str(),
            "sampling_params": [dict(temperature=0, max_new_tokens=NEW_TOKENS,
                                     custom_params=custom_params(len(prompts[i]), n, eos))
                                for i, n in enumerate(lengths)]}
    r = httpx.post(f"{url}/generate", json=body, timeout=600)
    r.raise_for_status()
    return r.json()


def _target_probs(url: str, prompt: list[int]) -> dict:
    """The likeliest first tokens t1 of a prompt and, for each, p(t2 | prompt, t1)."""
    probe = dict(temperature=0, max_new_tokens=1, return_logprob=True, logprob_start_len=-1)
    first = _generate(url, [prompt], top_logprobs_num=T1_CANDIDATES, **probe)[0]
    p_t1 = {tid: math.exp(lp) for lp, tid, *_ in first["meta_info"]["output_top_logprobs"][0]}
    second = _generate(url, [prompt + [t] for t in p_t1], top_logprobs_num=64, **probe)
    return {t: {tid: math.exp(lp) for lp, tid, *_ in o["meta_info"]["output_top_logprobs"][0]}
            for t, o in zip(p_t1, second)}


@pytest.fixture(scope="module")
def started(tiny_model, logs):
    """The module's instances that need nothing from another one's answers, started side by side at once
    (an instance's start-up is mostly single-threaded imports, so two or more overlap on the machine's
    cores); each fixture waits for its own and stops it once it is done. --sleep-on-idle: an instance
    waiting its turn does not spin a core meanwhile. The SEER instance with scripted drafts starts
    later: its plan is made of plain SGLang's answers."""
    specs = {"plain": _spec(tiny_model, logs, "plain", ["--enable-custom-logit-processor", "--sleep-on-idle"],
                            with_plugin=False),
             "seeded": _spec(tiny_model, logs, "seeded", ["--sleep-on-idle"]),
             "budgeted": _budgeted_spec(tiny_model, logs, "budgeted", "ragged"),
             "bucketed": _budgeted_spec(tiny_model, logs, "bucketed", "bucketed"),
             "ngram": _spec(tiny_model, logs, "ngram", ["--speculative-algorithm", "NGRAM", "--sleep-on-idle",
                                                       *SPEC_ARGS])}
    instances = {}
    try:
        for name, spec in specs.items():
            instances[name] = start_instance(spec)
        yield instances
    finally:
        stop_instances(list(instances.values()))


@pytest.fixture(scope="module")
def plain(tiny_model, logs, started) -> dict:
    """Greedy outputs, forced lengths and the target distributions for the sampling checks (one prompt
    drafted with trees, one with chains) from plain SGLang without the seer plugin; seeded temperature-1
    outputs from SGLang without speculation, with the plugin's seeded-sampling hook (on the CPU engine
    SGLang's seeded sampler runs only through it)."""
    prompts = _prompts(tiny_model, 34)
    inst, seeded_inst = _healthy(started["plain"]), _healthy(started["seeded"])
    try:
        greedy_outs = _generate(inst.url, prompts[:32], temperature=0, max_new_tokens=NEW_TOKENS, return_logprob=True,
                                top_logprobs_num=2)
        greedy = [o["output_ids"] for o in greedy_outs]
        forced = _forced_batch(inst.url, tiny_model, prompts, "pf")
        replay, params = _replayed(tiny_model, prompts[9])
        replayed = _generate(inst.url, [prompts[9]], temperature=1.0, max_new_tokens=NEW_TOKENS + 8, **params)
        p_t2 = {shape: _target_probs(inst.url, prompts[32 + k]) for k, shape in enumerate(("tree", "chain"))}
    except BaseException:
        stop_instances([seeded_inst])
        raise
    finally:
        stop_instances([inst])
    try:
        seeded = _generate(seeded_inst.url, [prompts[i // 4] for i in range(32)], seeds=SEEDS, **SEEDED)
    finally:
        stop_instances([seeded_inst])
    return {"prompts": prompts[:32], "greedy": greedy, "greedy_meta": [o["meta_info"] for o in greedy_outs], "forced": forced,
            "replay": replay, "replayed": replayed[0]["output_ids"],
            "seeded": [o["output_ids"] for o in seeded],
            "sample_prompts": {"tree": prompts[32], "chain": prompts[33]}, "p_t2": p_t2}


@pytest.fixture(scope="module")
def seer(tiny_model, logs, plain) -> dict:
    """One SEER server: oracle trees (32 samples), staggered siblings on group-suffix drafts (8 groups x 4),
    and N_SAMPLED samples at temperature 1 that get the three likeliest second tokens as drafts."""
    prompts, greedy = plain["prompts"], plain["greedy"]
    table = [[plain["sample_prompts"][shape] + [t1], sorted(p, key=p.get, reverse=True)[:3], shape]
             for shape, by_t1 in plain["p_t2"].items() for t1, p in by_t1.items()]
    refs = {f"o{i}": prompts[i] + greedy[i] for i in range(32)}
    refs.update({f"f{i}": refs[f"o{i}"] for i in range(len(FORCED_LENGTHS))})
    plan = {"refs": refs, "table": table}
    plan_path = logs / "plan.json"
    plan_path.write_text(json.dumps(plan))
    here = Path(__file__).resolve().parent  # this module, and conftest one folder up
    address = f"tcp://127.0.0.1:{free_port()}"
    with open(logs / "draft_server.log", "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "seer_sglang.draft_server", "--bind", address],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    env = {PLAN_ENV: str(plan_path), "PYTHONPATH": os.pathsep.join(
               p for p in (str(here), str(here.parent), os.environ.get("PYTHONPATH")) if p),
           **PluginConfig(drafter="test_spec_engine:ScriptedDrafter", draft_server=address,
                          budget="full").to_env()}  # every scripted node is verified
    inst = None
    try:
        wait_ready(address, timeout_s=60)
        with DraftClient(address) as elsewhere:  # another instance finished sibling 0 of groups x10..x13
            for i in range(10, 14):
                elsewhere.register_group(f"x{i}", prompts[i])
                elsewhere.update(f"x{i}", f"x{i}-0", 0, greedy[i])
            assert elsewhere.flush(10)
        inst = _start(tiny_model, logs, "seer", ["--speculative-algorithm", "SEER", "--enable-custom-logit-processor",
                                                 *SPEC_ARGS], env)
        oracle = _generate(inst.url, prompts[:32], [f"o{i}-0-c0" for i in range(32)], temperature=0,
                           max_new_tokens=NEW_TOKENS)
        first = _generate(inst.url, prompts[:8], [f"s{i}-0-c0" for i in range(8)], temperature=0,
                          max_new_tokens=NEW_TOKENS)
        rest_rids = [f"s{i}-{j}-c0" for i in range(8) for j in (1, 2, 3)]
        rest = _generate(inst.url, [prompts[int(r.split("-")[0][1:])] for r in rest_rids], rest_rids,
                         temperature=0, max_new_tokens=NEW_TOKENS)
        half = NEW_TOKENS // 2  # two samples in two chunks: the second resends the prompt + the first half
        chunk0 = _generate(inst.url, prompts[8:10], ["c8-0-c0", "c9-0-c0"], temperature=0, max_new_tokens=half)
        chunk1 = _generate(inst.url, [prompts[i] + o["output_ids"] for i, o in zip((8, 9), chunk0)],
                           ["c8-0-c1", "c9-0-c1"], temperature=0, max_new_tokens=NEW_TOKENS - half)
        sampled = {shape: _generate(inst.url, [prompt] * N_SAMPLED, [f"{shape}-{i}-c0" for i in range(N_SAMPLED)],
                                    seeds=list(range(N_SAMPLED)), temperature=1.0, max_new_tokens=2)
                   for shape, prompt in plain["sample_prompts"].items()}
        lead, later = [i for i in range(32) if i % 4 == 0], [i for i in range(32) if i % 4]
        seeded = dict(zip(lead + later, [
            *_generate(inst.url, [prompts[i // 4] for i in lead], [f"m{i // 4}-0-c0" for i in lead],
                       seeds=[SEEDS[i] for i in lead], **SEEDED),
            *_generate(inst.url, [prompts[i // 4] for i in later], [f"m{i // 4}-{i % 4}-c0" for i in later],
                       seeds=[SEEDS[i] for i in later], **SEEDED)]))
        seeded = [seeded[i] for i in range(32)]
        forced = []  # oracle trees run past the forced end: the processor must see each node's depth
        for i, length in enumerate(FORCED_LENGTHS):
            forced += _generate(inst.url, [prompts[i]], [f"f{i}-0-c0"], temperature=0, max_new_tokens=NEW_TOKENS,
                                **_forced(tiny_model, prompts[i], length))
        remote_rids = [f"x{i}-{j}-c0" for i in range(10, 14) for j in (1, 2)]
        # A sibling of each group first registers it here; the instance's draft client then fetches
        # sibling 0's tokens in the background (every 20 ms), well before the measured siblings start.
        _generate(inst.url, prompts[10:14], [f"x{i}-3-c0" for i in range(10, 14)], temperature=0, max_new_tokens=1)
        time.sleep(1.0)
        remote = _generate(inst.url, [prompts[int(r.split("-")[0][1:])] for r in remote_rids], remote_rids,
                           temperature=0, max_new_tokens=NEW_TOKENS)
        on_server = _server_tokens(address, "o0")
    finally:
        if inst is not None:
            stop_instances([inst])
        server.terminate()
        server.wait(timeout=10)
    seen: dict[str, dict] = {}  # the replica as of each request's last update
    for line in (logs / "plan.json.seen.jsonl").read_text().splitlines():
        group, prompt, request, tokens, sibling0 = json.loads(line)
        seen.setdefault(group, {"prompt": prompt, "requests": {}})["requests"][request] = tokens
        seen[group]["prompt"] = prompt
        if sibling0 is not None and request != f"{group}-0":
            seen[group]["sibling0"] = sibling0
    chunked = [a["output_ids"] + b["output_ids"] for a, b in zip(chunk0, chunk1)]
    return {"oracle": oracle, "first": first, "rest": rest, "rest_rids": rest_rids, "chunked": chunked,
            "sampled": sampled, "seeded": seeded, "forced": forced, "seen": seen, "remote": remote, "remote_rids": remote_rids, "on_server": on_server}


def _server_tokens(address: str, group: str) -> dict[str, list[int]]:
    """Every request's tokens of a group as the draft server holds them (waits for the pushes to land)."""
    for _ in range(600):
        reply = call(address, "fetch", [group], {group: {"v": -1, "prompt_len": 0, "counts": {}}})[group]
        tails = {rid: list(unpack_tokens(data)) for rid, (_, data) in (reply or {}).get("tails", {}).items()}
        if tails and all(len(t) == NEW_TOKENS for t in tails.values()):
            break
        time.sleep(0.05)
    return tails


def _accept_len(outs: list[dict]) -> float:
    """Tokens per verify step over the decode phase (the first token comes from prefill)."""
    steps = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outs)
    return sum(len(o["output_ids"]) - 1 for o in outs) / max(1, steps)


def test_seer_greedy_equals_plain_sglang(plain, seer):
    greedy = plain["greedy"]
    assert [o["output_ids"] for o in seer["oracle"]] == greedy
    assert [o["output_ids"] for o in seer["first"]] == greedy[:8]
    assert [o["output_ids"] for o in seer["rest"]] == [greedy[int(r.split("-")[0][1:])] for r in seer["rest_rids"]]
    assert all(len(g) == NEW_TOKENS for g in greedy)


def test_seer_verifies_trees_with_wrong_branches(seer):
    """Oracle trees lead with a wrong branch, so each accepted token went through sibling traversal."""
    metas = [o["meta_info"] for o in seer["oracle"]]
    assert all(m["spec_verify_ct"] > 0 for m in metas)
    correct = sum(m["spec_num_correct_drafts"] for m in metas)
    assert correct > 0 and _accept_len(seer["oracle"]) > 2.0
    assert all(m["spec_accept_length"] > 1 for m in metas)


def test_siblings_draft_from_each_other(seer):
    """Siblings that start after a finished sibling accept its whole output as drafts: every verify step
    emits all DRAFT_TOKENS tokens, so the decode phase takes the fewest steps possible."""
    fewest = -(-(NEW_TOKENS - 1) // DRAFT_TOKENS)
    assert [o["meta_info"]["spec_verify_ct"] for o in seer["rest"]] == [fewest] * len(seer["rest"])
    assert _accept_len(seer["first"]) < 2 < _accept_len(seer["rest"])


def test_drafter_is_fed_every_committed_token(plain, seer):
    seen, prompts = seer["seen"], plain["prompts"]
    for i, out in enumerate(seer["oracle"]):
        assert seen[f"o{i}"]["prompt"] == prompts[i]
        assert seen[f"o{i}"]["requests"][f"o{i}-0"] == out["output_ids"]
    for rid, out in zip(seer["rest_rids"], seer["rest"]):
        assert seen[rid.split("-")[0]]["requests"][rid.rsplit("-", 1)[0]] == out["output_ids"]
    for i, out in zip((8, 9), seer["chunked"]):  # a later chunk extends its sample, not the prompt
        assert out == plain["greedy"][i]
        assert seen[f"c{i}"] == {"prompt": prompts[i], "requests": {f"c{i}-0": out}}
    fed = seen["chain"]["requests"]
    assert len(fed) == N_SAMPLED
    assert all(fed[f"chain-{i}"] == o["output_ids"] for i, o in enumerate(seer["sampled"]["chain"]))


def test_siblings_on_another_instance_draft_through_the_server(plain, seer):
    """Sibling 0 of groups x10..x13 ran elsewhere; this instance's siblings draft its output from the
    draft server, and this instance's own tokens reach the server."""
    greedy = plain["greedy"]
    assert [o["output_ids"] for o in seer["remote"]] == [greedy[int(r.split("-")[0][1:])] for r in seer["remote_rids"]]
    for rid in seer["remote_rids"]:  # the replica held sibling 0's tokens, fetched from the server
        group = rid.split("-")[0]
        assert f"{group}-0" not in seer["seen"][group]["requests"]
        assert seer["seen"][group]["sibling0"] == greedy[int(group[1:])]
    # Siblings with nothing to draft from stay below 2 tokens per step (test_siblings_draft_from_each_other).
    assert _accept_len(seer["remote"]) > 2.0
    assert seer["on_server"] == {"o0-0": seer["oracle"][0]["output_ids"]}


@pytest.mark.parametrize("shape", ["tree", "chain"])
def test_seer_sampling_is_lossless(plain, seer, shape):
    """Temperature 1, N_SAMPLED draws per draft shape: the second token (drafted as the three likeliest second
    tokens, as siblings or as a chain) follows the target distribution p(t2 | prompt, t1) of the model without
    speculation, for each likely first token t1 (chi-squared goodness of fit)."""
    from scipy.stats import chi2

    outs, stat, dof = seer["sampled"][shape], 0.0, 0
    covered = [o for o in outs if o["output_ids"][0] in plain["p_t2"][shape]]
    assert len(covered) >= 0.3 * N_SAMPLED
    for t1, probs in plain["p_t2"][shape].items():
        t2 = [o["output_ids"][1] for o in covered if o["output_ids"][0] == t1]
        bins = [t for t in sorted(probs, key=probs.get, reverse=True) if probs[t] * len(t2) >= 5]
        if not bins:
            continue
        observed = [t2.count(t) for t in bins] + [sum(1 for t in t2 if t not in bins)]
        expected = [probs[t] * len(t2) for t in bins]
        expected.append(len(t2) - sum(expected))
        if expected[-1] < 5:  # too rare for its own bin: fold into the last one
            observed[-2:], expected[-2:] = [sum(observed[-2:])], [sum(expected[-2:])]
        stat += sum((o - e) ** 2 / e for o, e in zip(observed, expected))
        dof += len(observed) - 1
    assert dof >= 10
    assert chi2.sf(stat, dof) > 1e-3, (stat, dof)
    accepted = sum(o["meta_info"]["spec_num_correct_drafts"] for o in covered)
    assert accepted > 0.25 * len(covered)  # the drafts carry much of the mass: accept and reject paths both run


def test_seeded_sampling_is_identical_with_speculation(plain, seer):
    """Temperature 1, top-p, top-k, 8 groups of 4 seeded siblings drafting from each other: every token equals
    SGLang's seeded sampler without speculation; sibling 1 (sibling 0's seed) accepts sibling 0's output."""
    assert [o["output_ids"] for o in seer["seeded"]] == plain["seeded"]
    repeats = [o for i, o in enumerate(seer["seeded"]) if i % 4 == 1]
    assert _accept_len(repeats) > 4


def test_custom_logit_processor_runs_on_every_tree_node(tiny_model, plain, seer):
    """The forced-length processor ends each sample exactly at its target although the oracle trees draft past
    it: verify rows see their draft depth. Before the end, the tokens are the greedy ones."""
    eos = _eos(tiny_model)
    for i, (length, out) in enumerate(zip(FORCED_LENGTHS, seer["forced"])):
        assert out["output_ids"] == plain["greedy"][i][:length - 1] + [eos]
    assert sum(o["meta_info"]["spec_num_correct_drafts"] for o in seer["forced"]) > 0


def test_forced_length_is_exact_in_plain_and_budgeted_steps(tiny_model, plain, budgeted):
    """The benchmarks' forced-length processor ends a sample exactly at its target in SGLang's own steps
    (whose output_ids trail by a token under the overlap scheduler) and in the SEER worker's plain decode
    steps (a batch of 8 verifies no drafts), so every mode of a benchmark generates the same tokens."""
    eos = _eos(tiny_model)
    for outs in (plain["forced"], budgeted["forced"]):
        for i, out in enumerate(outs):
            length = FORCED_LENGTHS[i % len(FORCED_LENGTHS)]
            assert out["output_ids"] == plain["greedy"][i][:length - 1] + [eos], (i, length)


def test_replayed_text_is_written_exactly_and_drafts_accept_by_it(plain, budgeted):
    """The emulated benchmarks' replay: a sample writes exactly its recorded text, in SGLang's own steps and
    under speculation at temperature 1. A sibling that replays the same text drafts it from its group and
    the drafts are accepted (2 per step, the budget's gamma* alone), so acceptance follows the text."""
    assert plain["replayed"] == plain["replay"]
    lead, sibling = budgeted["replayed"]
    assert lead["output_ids"] == sibling["output_ids"] == plain["replay"]
    assert sibling["meta_info"]["spec_verify_ct"] == -(-(NEW_TOKENS - 1) // 3), sibling["meta_info"]
    assert lead["meta_info"]["spec_num_correct_drafts"] == 0


# Step cost 10 ms + 60 ms per verified token and request; the first two drafts are accepted 90% of the time,
# later ones never: the best draft length is 2 at batch size 1 and 0 (no drafts) from batch size 2 on.
# gamma* = 2 at batch sizes 1 and 2, 0 at 8 (the verify overhead of 40 ms per sequence no longer pays)
BUDGET_PROFILE = {"base_s": 0.1, "per_seq_s": 0.0, "per_token_s": 0.01, "verify_per_seq_s": 0.04,
                  "accept_curve": [0.9, 0.9, 0, 0, 0, 0, 0]}


def _budgeted_requests(url: str, prompts: list[list[int]]) -> dict:
    """Per group: sibling 0 alone, then sibling 1 alone (it drafts sibling 0's output), a pair, then
    siblings 2 and 3 of all groups together."""
    with_logprobs = dict(temperature=0, max_new_tokens=NEW_TOKENS, return_logprob=True, top_logprobs_num=2)
    alone = {j: [_generate(url, [prompts[g]], [f"b{g}-{j}-c0"], **with_logprobs)[0] for g in range(4)]
             for j in (0, 1)}
    # a pair: sibling 4 of group 0 (siblings 0 and 1 have finished: drafts) and a sample of a new group
    pair = _generate(url, [prompts[0], prompts[4]], ["b0-4-c0", "n4-0-c0"], **with_logprobs)
    rids = [f"b{g}-{j}-c0" for g in range(4) for j in (2, 3)]
    together = _generate(url, [prompts[int(r[1])] for r in rids], rids, **with_logprobs)
    return {"alone": alone, "pair": pair, "together": together, "together_groups": [int(r[1]) for r in rids]}


def _budgeted_spec(tiny_model, logs, name: str, layout: str) -> InstanceSpec:
    """SEER with the group-suffix drafter under the adaptive budget and a fixed profile."""
    profile = logs / "budget_profile.json"
    profile.write_text(json.dumps(BUDGET_PROFILE))
    env = PluginConfig(drafter="group-suffix", budget="adaptive", cost_path=str(profile),
                       verify_layout=layout).to_env()
    return _spec(tiny_model, logs, name, ["--speculative-algorithm", "SEER", "--enable-custom-logit-processor",
                                          "--sleep-on-idle", *SPEC_ARGS], env)


@pytest.fixture(scope="module")
def budgeted(tiny_model, logs, started, plain) -> dict:
    """The budget's requests on the ragged verify (the CPU's), after a forced batch of 8 and before two
    siblings replaying one recorded text."""
    prompts = plain["prompts"]
    inst = _healthy(started["budgeted"])
    try:
        forced = _forced_batch(inst.url, tiny_model, prompts, "bf")  # a batch of 8: plain decode steps first
        out = _budgeted_requests(inst.url, prompts)
        # two siblings replay one recorded text at temperature 1, one after the other
        _, params = _replayed(tiny_model, prompts[9])
        replayed = [_generate(inst.url, [prompts[9]], [f"r9-{j}-c0"], temperature=1.0, max_new_tokens=NEW_TOKENS + 8,
                              **params)[0] for j in (0, 1)]
    finally:
        stop_instances([inst])
    return {**out, "forced": forced, "replayed": replayed}


@pytest.fixture(scope="module")
def bucketed(tiny_model, logs, started, plain) -> dict:
    """The same requests with the verify padded to fixed-width buckets (the layout a GPU captures graphs
    for), forced on the CPU."""
    prompts = plain["prompts"]
    inst = _healthy(started["bucketed"])
    try:
        _forced_batch(inst.url, tiny_model, prompts, "bf")
        return _budgeted_requests(inst.url, prompts)
    finally:
        stop_instances([inst])


def test_adaptive_budget_sets_the_draft_length_per_batch_size(plain, budgeted):
    """Alone, sibling 1 has sibling 0's whole output as drafts but verifies exactly 2 per step (3 tokens a step);
    in a batch of 8 speculation does not pay, so no draft is verified. Tokens equal plain SGLang throughout."""
    greedy = plain["greedy"]
    for j in (0, 1):
        assert [o["output_ids"] for o in budgeted["alone"][j]] == greedy[:4]
    for out in budgeted["alone"][1]:
        meta = out["meta_info"]
        assert meta["spec_verify_ct"] == -(-(NEW_TOKENS - 1) // 3), meta
        assert NEW_TOKENS - 1 - meta["spec_verify_ct"] <= meta["spec_num_correct_drafts"] <= 2 * meta["spec_verify_ct"]
    assert [o["output_ids"] for o in budgeted["together"]] == [greedy[g] for g in budgeted["together_groups"]]
    assert all(o["meta_info"]["spec_num_correct_drafts"] == 0 for o in budgeted["together"])
    assert all(o["meta_info"]["spec_verify_ct"] == NEW_TOKENS - 1 for o in budgeted["together"])


def test_budget_goes_where_drafts_are_likely_accepted(plain, budgeted):
    """A batch of 2 shares gamma* * B = 4 draft tokens: the sibling with a group to draft from gets more
    than gamma* = 2 of them, which only a per-request split (and a ragged verify) gives. Tokens and
    logprobs equal plain SGLang."""
    greedy, meta = plain["greedy"], plain["greedy_meta"]
    drafted, fresh = budgeted["pair"]
    assert drafted["output_ids"] == greedy[0] and fresh["output_ids"] == greedy[4]
    steps = drafted["meta_info"]["spec_verify_ct"]
    assert steps < -(-(NEW_TOKENS - 1) // 3), drafted["meta_info"]  # fewer steps than 2 drafts a step allow
    for out, g in ((drafted, 0), (fresh, 4)):
        got, ref = _logprobs(out["meta_info"]), _logprobs(meta[g])
        assert got[0] == pytest.approx(ref[0], abs=1e-4)
        assert [[t for _, t in top] for top in got[1]] == [[t for _, t in top] for top in ref[1]]


def _logprobs(meta: dict) -> tuple[list[float], list[list[tuple[float, int]]]]:
    return ([lp for lp, *_ in meta["output_token_logprobs"]],
            [[(lp, tid) for lp, tid, *_ in top] for top in meta["output_top_logprobs"]])


def test_the_bucketed_verify_decides_and_samples_as_the_ragged_one(logs, plain, budgeted, bucketed):
    """Padded to fixed widths, the verify takes the same budget decisions as the ragged one (the same
    verify steps and accepted drafts per request, under a fixed cost profile) and the same tokens and
    logprobs, which are plain SGLang's without speculation."""
    greedy, meta = plain["greedy"], plain["greedy_meta"]
    pairs = [(a, b) for j in (0, 1) for a, b in zip(budgeted["alone"][j], bucketed["alone"][j])]
    pairs += list(zip(budgeted["pair"], bucketed["pair"])) + list(zip(budgeted["together"], bucketed["together"]))
    groups = [*range(4), *range(4), 0, 4, *budgeted["together_groups"]]
    for (ragged, padded), g in zip(pairs, groups):
        assert padded["output_ids"] == ragged["output_ids"] == greedy[g]
        for key in ("spec_verify_ct", "spec_num_correct_drafts"):
            assert padded["meta_info"][key] == ragged["meta_info"][key], (g, key)
        got, ref = _logprobs(padded["meta_info"]), _logprobs(meta[g])
        assert got[0] == pytest.approx(ref[0], abs=1e-4)
    # drafts were verified (sibling 1 alone verifies 2 a step: 3 nodes, padded to the bucket of 4)
    assert all(o["meta_info"]["spec_num_correct_drafts"] > 0 for o in bucketed["alone"][1])
    assert "adaptive budget, bucketed verify" in (logs / "bucketed.log").read_text()
    assert "adaptive budget, ragged verify" in (logs / "budgeted.log").read_text()


def test_logprobs_equal_plain_sglang_with_and_without_drafts(plain, budgeted):
    """Logprobs (sampled token and top 2) equal SGLang's without speculation, whether a step verified
    drafts (sibling 1 alone) or ran as a plain decode step (the batch of 8, where drafts do not pay)."""
    outs = [(o, g) for o, g in zip(budgeted["alone"][1], range(4))]
    outs += list(zip(budgeted["together"], budgeted["together_groups"]))
    for out, g in outs:
        got, ref = _logprobs(out["meta_info"]), _logprobs(plain["greedy_meta"][g])
        assert len(got[0]) == len(ref[0]) == NEW_TOKENS
        assert got[0] == pytest.approx(ref[0], abs=1e-4)
        assert [[t for _, t in top] for top in got[1]] == [[t for _, t in top] for top in ref[1]]
        assert [lp for top in got[1] for lp, _ in top] == pytest.approx([lp for top in ref[1] for lp, _ in top],
                                                                         abs=1e-4)


def test_sglang_ngram_on_cpu_equals_plain_sglang(tiny_model, logs, started, plain):
    """SGLang's own NGRAM (its C++ corpus) verifying through seer_verify; the second pass drafts from the first."""
    prompts, greedy = plain["prompts"][:32], plain["greedy"]
    inst = _healthy(started["ngram"])
    try:
        passes = [_generate(inst.url, prompts, temperature=0, max_new_tokens=NEW_TOKENS) for _ in range(2)]
        # Token supports under SGLang's other speculative algorithms: SGLang refuses them, and so does a
        # seer frontend over such an instance, by name, before any chunk is sent.
        ask = {"input_ids": prompts[0], "sampling_params": {"temperature": 0, "max_new_tokens": 4},
               "return_sampling_mask": True}
        assert httpx.post(f"{inst.url}/generate", json=ask, timeout=120).status_code == 400
        with running_seer(tiny_model, logs / "seer-over-ngram", "--instance-urls", inst.url) as server:
            r = httpx.post(f"{server.url}/generate", json=ask, timeout=120)
            assert r.status_code == 400 and r.json()["error"]["code"] == "sampling_mask_with_speculation", r.text
            del ask["return_sampling_mask"]
            assert httpx.post(f"{server.url}/generate", json=ask, timeout=120).status_code == 200
    finally:
        stop_instances([inst])
    for outs in passes:
        assert [o["output_ids"] for o in outs] == greedy
    assert sum(o["meta_info"]["spec_num_correct_drafts"] for o in passes[1]) > 0
    assert _accept_len(passes[1]) > _accept_len(passes[0])
