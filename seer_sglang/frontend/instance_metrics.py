"""The instances' own Prometheus metrics (``sglang:*``), re-exported by the frontend with an
``instance`` label, so dashboards built for SGLang keep working when they scrape seer's ``/metrics``.

Prometheus' text format wants each metric family in one group with one HELP and TYPE: the families of
all instances are merged, their samples relabelled."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?\s+(?P<rest>.+)$")


def _relabel(line: str, instance: int) -> str:
    m = _SAMPLE.match(line)
    if m is None:
        return line
    labels = m.group("labels")
    label = f'instance="{instance}"'
    return f"{m.group('name')}{{{label + (',' + labels if labels else '')}}} {m.group('rest')}"


def merge(texts: list[tuple[int, str]]) -> str:
    """One exposition of every instance's families: (instance, its /metrics text) in."""
    families: dict[str, list[str]] = {}  # family -> HELP/TYPE lines, then samples
    for instance, text in texts:
        family = None
        seen_header: set[str] = set()
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    lines = families.setdefault(family, [])
                    key = f"{family} {parts[1]}"
                    if not any(x.startswith(f"# {parts[1]} {family} ") or x == line for x in lines) \
                            and key not in seen_header:
                        lines.append(line)
                    seen_header.add(key)
                continue
            name = line.split("{", 1)[0].split(None, 1)[0]
            target = family if family is not None and name.startswith(family) else name
            families.setdefault(target, []).append(_relabel(line, instance))
    out = []
    for lines in families.values():
        out += [x for x in lines if x.startswith("#")] + [x for x in lines if not x.startswith("#")]
    return "\n".join(out) + ("\n" if out else "")
