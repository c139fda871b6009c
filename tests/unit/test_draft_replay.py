"""The drafter replay: acceptance against a known continuation, and the group drafter's advantage."""

from __future__ import annotations

import random

from benchmarks.draft_replay import accepted_length, replay, replay_with_references
from seer_sglang.speculative.draft import Draft


def test_accepted_length_follows_the_matching_branch():
    # root -> 5 -> 6 -> 7, and root -> 9 -> 8
    tree = Draft([5, 9, 6, 8, 7], [-1, -1, 0, 1, 2], [0.5, 0.4, 0.4, 0.3, 0.3])
    assert accepted_length(tree, [5, 6, 7, 1]) == 3
    assert accepted_length(tree, [9, 8, 8]) == 2
    assert accepted_length(tree, [9, 6]) == 1
    assert accepted_length(tree, [4]) == 0
    assert accepted_length(Draft(), [1, 2]) == 0


def _groups(seed: int, shared: float, lengths: tuple[int, ...] = tuple(120 - 5 * k for k in range(8))) -> list[dict]:
    """4 groups of 8 siblings: each output copies a group template token by token with probability
    ``shared``, else writes a random token, so siblings share text but never a whole output."""
    rng = random.Random(seed)
    groups = []
    for _ in range(4):
        prompt = [rng.randrange(1000) for _ in range(20)]
        template = [rng.randrange(1000) for _ in range(max(lengths))]
        outputs = [[t if rng.random() < shared else rng.randrange(1000) for t in template[:n]] for n in lengths]
        groups.append({"prompt": prompt, "outputs": outputs})
    return groups


def test_group_drafter_accepts_more_when_siblings_share_text():
    """With the probe sibling run first (as context-aware scheduling does), the later siblings draft its
    text; a request's own history never repeats here, so its own drafts almost never hit."""
    groups = _groups(0, shared=0.9, lengths=(120, 120, 80, 75, 70, 65, 60, 55))  # sibling 1: a 40-token tail
    group = replay("group-suffix", groups, staggered=True)
    own = replay("suffix", groups, staggered=True)
    assert own.acceptance_length < 1.1
    assert group.acceptance_length > 1.5 * own.acceptance_length
    assert group.tokens == own.tokens == sum(len(o) - 1 for g in groups for o in g["outputs"])
    # the probe has no finished sibling to copy; the later siblings have it whole
    assert group.by_sibling[0] < 1.1 < 2 < min(group.by_sibling[1:])
    # sibling 1 ends alone in its group: the long tail, where copying pays most
    assert group.tail_steps > 10 and group.tail_acceptance_length > 2 > own.tail_acceptance_length


def test_siblings_in_lockstep_have_nothing_ahead_to_copy():
    """All siblings together at the same pace: no sibling is ahead, so shared text cannot be drafted yet."""
    groups = _groups(1, shared=0.9)
    together = replay("group-suffix", groups)
    assert together.acceptance_length < 1.1 < 2 < replay("group-suffix", groups, staggered=True).acceptance_length


def test_acceptance_grows_with_finished_sibling_references():
    """The paper's reference experiment: with no reference the group drafter is the per-request one;
    every finished sibling adds text to copy, and the per-request drafter never sees any of it."""
    groups = _groups(2, shared=0.8)
    group = [replay_with_references("group-suffix", groups, n) for n in (0, 1, 3, 7)]
    own = [replay_with_references("suffix", groups, n) for n in (0, 1, 3, 7)]
    assert group[0].acceptance_length == own[0].acceptance_length
    assert len({r.acceptance_length for r in own}) == 1
    assert own[0].acceptance_length < 1.1
    lengths = [r.acceptance_length for r in group]
    assert lengths == sorted(lengths) and lengths[1] > 1.5 and lengths[-1] > lengths[1] + 0.2
    assert all(r.tokens == sum(len(o) - 1 for g in groups for o in g["outputs"]) for r in group + own)


def test_the_replay_counts_acceptance_by_finished_siblings_and_pools_rare_counts():
    """The simulator's acceptance curve with the whole group decoding at once: every verify step lands in
    the bucket of its group's finished siblings, and counts seen in few steps are pooled."""
    groups = _groups(3, shared=0.9, lengths=(120, 120, 80, 75, 70, 65, 60, 55))
    r = replay("group-suffix", groups, staggered=True)
    assert sum(steps for _, steps in r.by_finished.values()) == r.steps
    assert sum(tokens for tokens, _ in r.by_finished.values()) == r.tokens
    assert r.by_finished[0][0] == sum(len(g["outputs"][0]) - 1 for g in groups)  # the probe runs alone first
    whole = r.finished_curve(min_steps=r.steps)
    assert list(whole.values()) == [r.tokens / r.steps]
    fine = r.finished_curve(min_steps=1)
    assert fine == {n: tokens / steps for n, (tokens, steps) in r.by_finished.items()}
    pooled = r.finished_curve(min_steps=50)
    assert len(pooled) < len(fine) and sorted(pooled) == list(pooled)
    # every sample's own steps, which the simulator of this very text follows sample by sample
    assert sum(steps for _, steps in r.by_sample.values()) == r.steps
    assert {key: tokens for key, (tokens, _) in r.by_sample.items()} == \
        {(g, i): len(out) - 1 for g, group in enumerate(groups) for i, out in enumerate(group["outputs"])}


def test_replay_names_samples_by_workload_seed_and_group():
    from benchmarks.draft_replay import sample_keys

    assert sample_keys({"groups": [{}, {}]}) == ["0:0", "0:1"]
    assert sample_keys({"workloads": [{"seed": 3, "groups": [{}, {}]}, {"seed": 5, "groups": [{}]}]}) == \
        ["3:0", "3:1", "5:0"]


def test_a_verify_width_takes_the_best_nodes_first_and_caps_what_a_step_accepts():
    """``width`` verifies at most that many draft nodes a step, best first (as the budget gives them out):
    one node accepts at most one draft a step, more nodes never accept less, and a width the draft
    never reaches is the whole draft."""
    groups = _groups(0, shared=0.9)
    by_width = {w: replay("group-suffix", groups, draft_tokens=8, staggered=True, width=w).acceptance_length
                for w in (1, 2, 4, 8, None)}
    assert 1.0 < by_width[1] <= 2.0
    assert by_width[1] < by_width[2] <= by_width[4] <= by_width[8]
    assert by_width[8] == by_width[None]
