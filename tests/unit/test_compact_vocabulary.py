"""An emulated benchmark may serve a model with a smaller vocabulary than its tokenizer: the workload's
tokens are mapped one to one into it, keeping every equality a drafter sees and the special tokens."""

import pytest

from benchmarks.harness.workload import Workload, compact_vocabulary, replay_for_warmup
from seer_sglang.sim.workload import TraceSample


def _work(prompts, replay=None, warm=(), warm_replay=None):
    return Workload(prompts=prompts, trace=[], warm_prompts=list(warm), warm_trace=[], eos=2, replay=replay,
                    warm_replay=warm_replay)


def test_tokens_map_one_to_one_and_special_tokens_keep_their_ids():
    first = _work([[1, 40000, 7, 2]], replay={(0, 0): [40000, 49000, 40000, 2]}, warm=[[1, 30000]])
    second = _work([[1, 49000, 5]])
    mapping = compact_vocabulary([first, second], 16, keep={0, 1, 2})
    assert mapping[1] == 1 and mapping[2] == 2
    assert len(set(mapping.values())) == len(mapping) and max(mapping.values()) < 16
    assert first.prompts == [[1, mapping[40000], mapping[7], 2]]
    assert first.replay[(0, 0)] == [mapping[40000], mapping[49000], mapping[40000], 2]
    assert second.prompts[0][1] == first.replay[(0, 0)][1]  # one map for all workloads
    assert first.warm_prompts == [[1, mapping[30000]]]


def test_the_warmup_replays_recorded_text_in_groups_of_its_own():
    """The warm-up's group g replays the recording's group g (cyclically), sibling for sibling, so the
    instances' draft budget learns acceptance on real text before the measured rollouts; its tokens
    take the same map as the measured ones."""
    replay = {(0, 0): [40000, 5], (0, 1): [40000, 6], (1, 0): [7, 8, 9], (1, 1): [7, 8]}
    warm = [TraceSample(g, i, 3, 1) for g in range(3) for i in range(2)]
    warm_replay = replay_for_warmup(warm, replay)
    assert warm_replay == {(0, 0): [40000, 5], (0, 1): [40000, 6], (1, 0): [7, 8, 9], (1, 1): [7, 8],
                           (2, 0): [40000, 5], (2, 1): [40000, 6]}
    work = _work([[1, 40000]], replay=replay, warm=[[1, 3]], warm_replay=warm_replay)
    mapping = compact_vocabulary([work], 16, keep={1, 2})
    assert work.warm_replay[(2, 0)] == [mapping[40000], mapping[5]] == work.replay[(0, 0)]


def test_a_workload_that_fits_is_left_alone_and_one_that_cannot_fit_is_refused():
    work = _work([[1, 7, 2]], replay={(0, 0): [9, 2]})
    assert compact_vocabulary([work], 16, keep={2}) is None
    assert work.prompts == [[1, 7, 2]]
    with pytest.raises(SystemExit, match="distinct tokens"):
        compact_vocabulary([_work([list(range(20, 40))])], 16, keep={2})


def test_a_bpe_tokenizer_cut_to_its_first_ids_still_tokenizes_any_text(tiny_model, tmp_path):
    """The compact model's tokenizer: every id it emits is inside the smaller vocabulary (SGLang's own
    warm-up request is text), and text still decodes back to itself."""
    import shutil

    from transformers import AutoTokenizer

    from seer_sglang.models import _truncate_bpe

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tiny_model}/{name}", tmp_path / name)
    _truncate_bpe(tmp_path / "tokenizer.json", 400)
    cut, full = AutoTokenizer.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tiny_model)
    text = "The capital city of France is Paris; 37 apples times 12 oranges = ? Ünïcödé ✓"
    ids = cut.encode(text)
    assert max(ids) < 400 and cut.decode(ids) == text
    assert len(ids) > len(full.encode(text))  # fewer merges, more tokens
    assert cut.eos_token_id == full.eos_token_id
