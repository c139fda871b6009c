"""Benchmark-only parts that must be importable inside the SGLang instances (a custom logit processor
is loaded there by name), kept apart from everything a production rollout runs."""
