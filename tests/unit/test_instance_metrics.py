"""Merging the instances' Prometheus texts: one HELP/TYPE per family, samples grouped, instance label."""

from prometheus_client.parser import text_string_to_metric_families

from seer_sglang.frontend.instance_metrics import merge

INSTANCE = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m"} {running}
# HELP sglang:e2e_request_latency_seconds Histogram of end-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 1.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 2.0
sglang:e2e_request_latency_seconds_sum{model_name="m"} 0.5
sglang:e2e_request_latency_seconds_count{model_name="m"} 2.0
"""


def test_families_merge_with_an_instance_label():
    text = merge([(0, INSTANCE.replace("{running}", "3")), (1, INSTANCE.replace("{running}", "5"))])
    assert text.count("# TYPE sglang:num_running_reqs gauge") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}  # a strict parser accepts it
    running = {s.labels["instance"]: s.value for s in families["sglang:num_running_reqs"].samples}
    assert running == {"0": 3.0, "1": 5.0}
    hist = families["sglang:e2e_request_latency_seconds"]
    assert hist.type == "histogram" and len(hist.samples) == 8
    assert all(s.labels["model_name"] == "m" for s in hist.samples)


def test_nothing_from_no_instance():
    assert merge([]) == ""
