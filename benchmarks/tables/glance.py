""""Results at a glance": one line per current run the manifest gives a ``headline``, in its order."""

from __future__ import annotations

from benchmarks.harness import manifest

from .format import RUN_PATHS, Results, table


def _link(label: str) -> str:
    return f"[{label}](../{RUN_PATHS[label]}/result.json)"


def glance_table(results: Results) -> str:
    """Superseded runs never lead: a headline on one is an error, as is a line that draws on one."""
    current = manifest.by_label("current")
    lines = sorted(((e.headline["order"], e) for e in manifest.read() if e.headline), key=lambda item: item[0])
    rows = []
    for _, entry in lines:
        labels = [entry.label, *entry.headline.get("with", ())]
        stale = [label for label in labels if label not in current]
        if stale:
            raise ValueError(f"the headline of {entry.label} draws on runs that are not current: {stale}")
        for label in labels:
            results[label]  # noqa: B018 (read: the manifest notes which sections quote each run)
        rows.append([entry.headline["what"], entry.headline["result"], entry.regime,
                     ", ".join(_link(label) for label in labels)])
    return "\n".join(table(["what", "result", "regime", "runs"], rows))
