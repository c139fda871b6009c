"""Triton / FlashInfer kernels of seer_sglang, imported as ``seer_kernels``.

(The folder is not importable as ``kernels``: that name belongs to a PyPI package SGLang uses.)
"""
