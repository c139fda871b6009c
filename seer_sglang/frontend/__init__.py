"""The frontend process: the HTTP API (OpenAI-compatible, rollout, admin), the rollout engine that
carries out the core policy's dispatch decisions over the SGLang instances, and the instance client."""
