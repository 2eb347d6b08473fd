"""``torchburn.visualize(model, *inputs)``: the compiled graph of a model, node by node, marked with where
each node really ran (natively in a torchburn region, or in PyTorch and why), as a text summary, a
Mermaid flowchart and a self-contained HTML page.

Example::

    >>> import torch, torchburn
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    >>> with torch.no_grad():
    ...     view = torchburn.visualize(model, torch.randn(2, 16), print_summary=False)
    >>> view.total_compute_nodes, view.native_ratio
    (5, 1.0)
    >>> view.to_mermaid().splitlines()[0]
    'flowchart TD'
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["visualize", "GraphVisualization", "VisualNode"]


@dataclass
class VisualNode:
    """One FX compute node: ``status`` is ``"native"``, ``"pytorch"`` or ``"not run"`` (a region not called
    yet); ``region`` the native region's index in its graph (None outside regions); ``reason`` why it
    ran in PyTorch."""

    graph: int  # index of the graph in the visualization
    kind: str  # "inference", "forward" or "backward"
    name: str
    op: str
    inputs: list
    status: str
    region: Optional[int] = None
    reason: Optional[str] = None


@dataclass
class GraphVisualization:
    """What :func:`visualize` returns: ``nodes`` (VisualNode per compute node of every compiled graph),
    ``explanation`` (the :class:`torchburn.Explanation` it was built from), and the figures below."""

    nodes: list = field(default_factory=list)
    explanation: Any = None

    @property
    def total_compute_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.status != "not run")

    @property
    def native_compute_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.status == "native")

    @property
    def native_ratio(self) -> float:
        """Native compute nodes / compute nodes that ran (1.0 when none ran)."""
        total = self.total_compute_nodes
        return self.native_compute_nodes / total if total else 1.0

    def summary(self) -> str:
        graphs = sorted({(n.graph, n.kind) for n in self.nodes})
        lines = [f"torchburn: {self.native_compute_nodes} of {self.total_compute_nodes} compute nodes ran natively "
                 f"({100 * self.native_ratio:.1f} %) in {len(graphs)} graph(s)"]
        for index, kind in graphs:
            nodes = [n for n in self.nodes if n.graph == index]
            regions = sorted({n.region for n in nodes if n.region is not None})
            native = sum(1 for n in nodes if n.status == "native")
            lines.append(f"  graph {index} ({kind}): {len(nodes)} nodes, {native} native in {len(regions)} region(s)")
            reasons: dict = {}
            for n in nodes:
                if n.status == "pytorch":
                    key = f"{n.op}: {n.reason}" if n.reason else n.op
                    reasons[key] = reasons.get(key, 0) + 1
            for key, count in sorted(reasons.items(), key=lambda item: -item[1]):
                lines.append(f"    in PyTorch x{count}: {key}")
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        """A Mermaid flowchart: one box per compute node (native regions as subgraphs), green native,
        red PyTorch, grey not run."""
        lines = ["flowchart TD", "  classDef native fill:#c8f7c5,stroke:#2e7d32",
                 "  classDef pytorch fill:#f9c7c7,stroke:#c62828", "  classDef notrun fill:#e0e0e0,stroke:#757575"]
        ids = {(n.graph, n.name): f"g{n.graph}_{_mermaid_id(n.name)}" for n in self.nodes}
        for index in sorted({n.graph for n in self.nodes}):
            nodes = [n for n in self.nodes if n.graph == index]
            kind = nodes[0].kind
            lines.append(f"  subgraph graph{index}[\"graph {index}: {kind}\"]")
            for region in [None] + sorted({n.region for n in nodes if n.region is not None}):
                members = [n for n in nodes if n.region == region]
                if region is not None:
                    lines.append(f"    subgraph g{index}_region{region}[\"region {region}\"]")
                for n in members:
                    css = {"native": "native", "pytorch": "pytorch"}.get(n.status, "notrun")
                    lines.append(f"      {ids[(index, n.name)]}[\"{_mermaid_text(n.op)}\"]:::{css}")
                if region is not None:
                    lines.append("    end")
            lines.append("  end")
            for n in nodes:
                for source in n.inputs:
                    if (index, source) in ids:
                        lines.append(f"  {ids[(index, source)]} --> {ids[(index, n.name)]}")
        return "\n".join(lines)

    def to_html(self) -> str:
        """A self-contained page: the summary, a table of every node, and the Mermaid chart (rendered
        by mermaid.js from a CDN when the page is viewed online; the chart source is in the page)."""
        rows = "\n".join(
            f"<tr class=\"{html.escape(n.status.replace(' ', ''))}\"><td>{n.graph}</td><td>{html.escape(n.kind)}</td>"
            f"<td>{html.escape(n.name)}</td><td>{html.escape(n.op)}</td><td>{html.escape(n.status)}</td>"
            f"<td>{'' if n.region is None else n.region}</td><td>{html.escape(n.reason or '')}</td></tr>"
            for n in self.nodes)
        return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>torchburn graph</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; font-size: 13px; }}
tr.native {{ background: #c8f7c5; }} tr.pytorch {{ background: #f9c7c7; }} tr.notrun {{ background: #e0e0e0; }}
</style></head><body>
<h1>torchburn graph</h1>
<pre>{html.escape(self.summary())}</pre>
<pre class="mermaid">
{html.escape(self.to_mermaid())}
</pre>
<table><tr><th>graph</th><th>kind</th><th>node</th><th>op</th><th>ran</th><th>region</th><th>reason</th></tr>
{rows}
</table>
<script type="module">
import mermaid from "https://cdn.jsdelivr.net/npm/mermaid@10/dist/mermaid.esm.min.mjs";
mermaid.initialize({{ startOnLoad: true, maxTextSize: 1000000 }});
</script>
</body></html>
"""

    def __repr__(self) -> str:
        return (f"GraphVisualization(total_compute_nodes={self.total_compute_nodes}, "
                f"native_ratio={self.native_ratio:.3f})")


def _mermaid_id(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "'")


def _failed_reasons(record: Any) -> dict:
    reasons = {}
    for names, reason in record.failed_regions:
        for name in names:
            reasons[name] = f"region failed to lower: {reason}"
    return reasons


def visualize(model: Any, *inputs: Any, output_html: Optional[str] = None, print_summary: bool = True,
              **kwargs: Any) -> GraphVisualization:
    """Compiles and runs `model` once on `inputs` (like :func:`torchburn.explain`) and returns a
    :class:`GraphVisualization` of every compiled graph. ``output_html``: also write the HTML page
    there; ``print_summary``: print :meth:`GraphVisualization.summary`."""
    from .backend import explain

    report = explain(model, *inputs, **kwargs)
    view = GraphVisualization(explanation=report)
    for index, record in enumerate(report.graphs):
        runs = record.region_runs()
        failed = _failed_reasons(record)
        for name, op, sources, region, unsupported in record.nodes:
            if region is not None:
                native, eager, why = runs[region]
                status = "pytorch" if eager else "native" if native else "not run"
                reason = (why or "no plan ran") if eager else None
            elif name in failed or unsupported:
                status, reason = "pytorch", failed.get(name) or f"not supported natively: {unsupported}"
            else:
                continue  # a view PyTorch makes for free outside any region (not counted, as in explain)
            view.nodes.append(VisualNode(index, record.kind, name, op, list(sources), status, region, reason))
    if output_html is not None:
        with open(output_html, "w", encoding="utf-8") as handle:
            handle.write(view.to_html())
    if print_summary:
        print(view.summary())
    return view
