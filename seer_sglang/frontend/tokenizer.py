"""Prompt encoding and output decoding in the frontend.

The frontend owns tokens: chunks continue from prompt + generated ids, so text is always decoded
here from the concatenated ids rather than pieced together from instance replies.
"""

from __future__ import annotations

from typing import Any

from ..core.request import Sample
from .errors import APIError


class PromptTokenizer:
    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path)
        self.vocab_size = len(self.tok)

    def encode_text(self, text: str) -> list[int]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON can carry a lone surrogate (\ud800), which no tokenizer takes
            raise APIError(f"the prompt is not valid Unicode: {e.reason} at character {e.start}",
                           param="text") from None
        return list(self.tok.encode(text))

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return list(out)

    def decode(self, ids: list[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens,
                               spaces_between_special_tokens=spaces_between_special_tokens)

    def token_str(self, token_id: int) -> str:
        return self.tok.decode([token_id], skip_special_tokens=False)

    def sample_text(self, sample: Sample) -> str:
        """The sample's text as SGLang's detokenizer makes it: a matched stop token is left out and the
        text cut before a matched stop string, unless the sample asked for ``no_stop_trim`` (then the
        text ends with the stop string)."""
        params, ids, matched = sample.params, sample.output_ids, sample.matched_stop
        if isinstance(matched, int) and not params.no_stop_trim and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = self.decode(ids, params.skip_special_tokens, params.spaces_between_special_tokens)
        if isinstance(matched, str):
            cut = text.find(matched)
            if cut >= 0:
                text = text[:cut + len(matched)] if params.no_stop_trim else text[:cut]
        return text

    def find_stop(self, sample: Sample) -> tuple[int, str] | None:
        """The shortest output prefix whose text holds a stop string: (its length, the string).

        Chunks are checked by SGLang one at a time, so a stop string spanning two chunks is found
        here. Containment only grows with the prefix, so a binary search needs O(log n) decodes.
        """
        stops = [s for s in sample.params.stop if s]
        ids, skip = sample.output_ids, sample.params.skip_special_tokens
        if not stops or not any(s in self.decode(ids, skip) for s in stops):
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in self.decode(ids[:mid], skip) for s in stops):
                hi = mid
            else:
                lo = mid + 1
        text = self.decode(ids[:lo], skip)
        matched = min((s for s in stops if s in text), key=text.find)
        return lo, matched


class TextStreamer:
    """Turns a growing id list into text deltas, holding back incomplete UTF-8 and possible stop prefixes."""

    def __init__(self, tokenizer: PromptTokenizer, stop: list[str], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.holdback = max((len(s) for s in self.stop), default=1) - 1
        self.skip = skip_special_tokens
        self.sent = ""

    def delta(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, self.skip)
        if text.endswith("\ufffd"):
            return ""
        for stop in self.stop:
            cut = text.find(stop)
            if cut >= 0:
                text = text[:cut]
        upto = max(len(self.sent), len(text) - self.holdback)
        out = text[len(self.sent):upto]
        self.sent += out
        return out

    def final(self, full_text: str) -> str:
        out = full_text[len(self.sent):] if full_text.startswith(self.sent) else ""
        self.sent += out
        return out
