"""The emulation check says where a miss is: in the body of the rollout or in its last 10% of samples."""

from benchmarks.emulation_check import compare


def run(completion_s: float, tail_s: float) -> dict:
    return {"completion_s": completion_s, "tail_s": tail_s, "retractions": 0,
            "spread": {"completion_s": {"std": 0.0, "min": completion_s, "max": completion_s}}}


def test_a_miss_in_the_tail_only_is_named_as_such():
    out = compare(run(56.0, 16.0), run(44.0, 7.0), bar=0.10)
    assert not out["within_bar"]
    assert abs(out["body_error"] - (37.0 / 40.0 - 1.0)) < 1e-9
    assert out["why"].startswith("in the tail:")


def test_a_miss_in_the_body_names_both():
    out = compare(run(50.0, 5.0), run(35.0, 5.0), bar=0.10)
    assert out["why"].startswith("in the body and the tail:")


def test_within_the_bar_has_no_why():
    out = compare(run(50.0, 5.0), run(47.0, 4.0), bar=0.10)
    assert out["within_bar"] and "why" not in out
