"""``candle bench``'s outputs: the JSON record, the markdown table and the
chart (PNG, with matplotlib when it is installed) of each case's speed ratio
per column: the baseline column's time over the column's, so above 1 is
faster than the baseline."""

from __future__ import annotations

import json
import math
from pathlib import Path


def ratio(report: dict, case: dict, column: str) -> float | None:
    """baseline time / column time for one case (None where either is missing)."""
    base = case["results"].get(report["baseline"], {}).get("median")
    t = case["results"].get(column, {}).get("median")
    return base / t if base and t else None


def _time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def markdown(report: dict) -> str:
    cols = [c["name"] for c in report["columns"]]
    lines = [f"# candle bench, {report['date']}", "",
             f"- command: `{report['command']}`",
             f"- machine: {report['machine']['cpu']}, {report['machine']['cores']} cores "
             f"({' '.join(report['machine']['isa'])}); {report['threads']} threads in every column",
             f"- each cell: median time per call over {report['settings']['reps']} interleaved repetitions, its "
             f"spread ((max - min) / median), and the ratio to `{report['baseline']}` (its time / this time: above "
             "1 is faster)", ""]
    lines += [f"- `{c['name']}`: {c['about']}" for c in report["columns"]]
    lines += [f"- {note}" for note in report["notes"]]
    lines += ["", "| case | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for case in report["cases"]:
        cells = []
        for col in cols:
            r = case["results"].get(col, {})
            if "median" in r:
                x = ratio(report, case, col)
                cells.append(f"{_time(r['median'])} ±{100 * r['spread']:.0f}%" + (f" ({x:.2f}x)" if x else ""))
            else:
                cells.append("—")
        lines.append(f"| {case['name']} | " + " | ".join(cells) + " |")
    skipped = [(case["name"], col, r["skipped"]) for case in report["cases"]
               for col, r in case["results"].items() if not r.get("skipped", "no ").startswith("no ")]
    if skipped:
        lines += ["", "Skipped (—): " + "; ".join(f"{name} on {col}: {why}" for name, col, why in skipped)]
    if report.get("choices"):
        lines += ["", "## Kernel choices written for this machine", ""]
        for plugin, choice in report["choices"].items():
            lines.append(f"`{plugin}` ({choice['path']}), each kernel's geometric mean of `{choice['base']}` time / "
                         f"`{plugin}` time over its cases:")
            lines.append("")
            for key, v in sorted(choice["kernels"].items()):
                lines.append(f"- {key}: {v['ratio']:.2f}x -> {'served by ' + plugin if v['serve'] else 'left to ' + choice['base']}")
            lines.append("")
    return "\n".join(lines) + "\n"


def chart(report: dict, path: Path) -> str:
    """Writes the PNG; returns "" or why it could not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (pip install matplotlib)"
    cols = [c["name"] for c in report["columns"] if c["name"] != report["baseline"]]
    cases = report["cases"]
    height = 0.8 / max(len(cols), 1)
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(cases) * max(1, len(cols) / 3) + 1.5))
    colors = plt.get_cmap("tab10")
    for j, col in enumerate(cols):
        ys, xs = [], []
        for i, case in enumerate(cases):
            x = ratio(report, case, col)
            if x:
                ys.append(i + (j - (len(cols) - 1) / 2) * height)
                xs.append(x)
        ax.barh(ys, xs, height=height, color=colors(j % 10), label=col)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(cases)), [c["name"] for c in cases], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"speed relative to {report['baseline']} (its time / the column's time; log scale)")
    ax.set_title(f"candle bench: {report['machine']['cpu']}, {report['threads']} threads", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    finite = [ratio(report, c, col) for c in cases for col in cols if ratio(report, c, col)]
    if finite:
        ax.set_xlim(min(0.5, min(finite) / 1.3), max(2.0, max(finite) * 1.3))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""


def write(report: dict, out_dir: Path) -> list[str]:
    """bench.json, bench.md and bench.png in out_dir; returns what was written (and what was not)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "bench.md").write_text(markdown(report))
    written = [str(out_dir / "bench.json"), str(out_dir / "bench.md")]
    why_not = chart(report, out_dir / "bench.png")
    return written + ([why_not] if why_not else [str(out_dir / "bench.png")])


def geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
