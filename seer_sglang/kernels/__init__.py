"""Triton / FlashInfer kernels of seer_sglang (tree-verify attention, the cascade verify), with the
float32 torch references the tests hold them to. Imports torch (and Triton or FlashInfer where a
kernel needs them), never SGLang."""
