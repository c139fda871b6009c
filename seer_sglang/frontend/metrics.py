"""Prometheus metrics of the frontend: requests, samples, tokens, chunks and per-instance load."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..core.accounting import KV_SOURCES, rollout_sources, spec_totals
from ..core.policy import InstanceView
from ..core.request import Sample


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("seer_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.samples = Counter("seer_samples", "Finished samples by finish reason", ["finish_reason"], registry=r)
        self.prompt_tokens = Counter("seer_prompt_tokens", "Prompt tokens of finished samples", registry=r)
        self.generation_tokens = Counter("seer_generation_tokens", "Generated tokens of finished samples", registry=r)
        self.chunks = Counter("seer_chunks", "Chunks dispatched, by instance", ["instance"], registry=r)
        self.sample_latency = Histogram("seer_sample_latency_seconds", "Submit-to-finish time of a sample",
                                        buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
                                        registry=r)
        self.instance_healthy = Gauge("seer_instance_healthy", "1 if the instance answers", ["instance"], registry=r)
        self.instance_running = Gauge("seer_instance_running_requests", "Running requests (SGLang telemetry)",
                                      ["instance"], registry=r)
        self.instance_waiting = Gauge("seer_instance_waiting_requests", "Waiting requests (SGLang telemetry)",
                                      ["instance"], registry=r)
        self.instance_kv_usage = Gauge("seer_instance_kv_usage", "Fraction of KV tokens in use", ["instance"], registry=r)
        self.instance_inflight = Gauge("seer_instance_inflight_chunks", "Our chunks in flight", ["instance"], registry=r)
        self.kv_tokens = Counter("seer_kv_context_tokens", "Context tokens of chunks by source: device cache, host "
                                 "(DRAM) tier, global pool, or recomputed", ["source"], registry=r)
        self.reprefill_tokens = Counter("seer_reprefill_tokens", "Tokens recomputed by continuation chunks",
                                        registry=r)
        self.draft_steps = Counter("seer_spec_draft_steps", "Speculative verify steps of finished samples",
                                   registry=r)
        self.accepted_tokens = Counter("seer_spec_accepted_tokens", "Draft tokens accepted by verify steps",
                                       registry=r)
        self.kv_pool_bytes = Gauge("seer_kv_pool_bytes", "Bytes of KV pages in the global pool", registry=r)
        self.kv_pool_evicted = Gauge("seer_kv_pool_evicted_pages", "Pages evicted by the pool's size bound",
                                     registry=r)
        self.generate_groups = Counter("seer_generate_groups", "Prompt groups formed from POST /generate requests",
                                       registry=r)
        self.generate_grouped_samples = Counter("seer_generate_grouped_samples", "POST /generate samples that ran "
                                                "in a group of more than one", registry=r)
        self.instance_retractions = Gauge("seer_instance_retractions", "SGLang retractions seen by our chunks",
                                          ["instance"], registry=r)

    def on_sample_done(self, sample: Sample) -> None:
        self.samples.labels(sample.finish_reason or "unknown").inc()
        self.prompt_tokens.inc(len(sample.prompt_ids))
        self.generation_tokens.inc(sample.generated)
        for chunk in sample.chunks:
            self.chunks.labels(str(chunk.instance)).inc()
        kv = rollout_sources([sample])
        for source in KV_SOURCES:
            self.kv_tokens.labels(source).inc(kv[source])
        self.reprefill_tokens.inc(kv["reprefill_tokens"])
        spec = spec_totals([sample])
        self.draft_steps.inc(spec["draft_steps"])
        self.accepted_tokens.inc(spec["accepted_tokens"])
        if sample.finished_at:
            self.sample_latency.observe(sample.finished_at - sample.submitted_at)

    def on_load(self, index: int, view: InstanceView) -> None:
        label = str(index)
        self.instance_healthy.labels(label).set(1 if view.healthy else 0)
        self.instance_running.labels(label).set(view.running)
        self.instance_waiting.labels(label).set(view.waiting)
        used = view.used_tokens / view.capacity_tokens if view.capacity_tokens else 0.0
        self.instance_kv_usage.labels(label).set(used)
        self.instance_inflight.labels(label).set(view.inflight)
        self.instance_retractions.labels(label).set(view.retractions)

    def render(self) -> bytes:
        return generate_latest(self.registry)
