"""Tables and the chart from the raw results, and their place in docs/benchmarks/real-code-bases.md.

The generated part of the docs section sits between two markers, so a rerun replaces the
figures and leaves the hand-written reading of them alone.
"""

from pathlib import Path
from typing import Any

from .configs import CONFIGS
from .runner import SCENARIOS, WARM

ROOT = Path(__file__).parent.parent.parent
DOCS = ROOT / "docs" / "benchmarks" / "real-code-bases.md"
CHART = ROOT / "docs" / "benchmark-chart.png"
BEGIN, END = "<!-- real-code-bases:begin -->", "<!-- real-code-bases:end -->"


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _cell(c: dict[str, Any], counted: bool, rounds: int) -> str:
    comp = sum(c["compilations"]) / max(1, len(c["compilations"]))
    jobs = sum(c["jobs"]) / max(1, len(c["jobs"]))
    flag = "" if c["identical_to_b"] in (True, None) and c["smoke_ok"] else " ⚠"
    hits = "" if not counted else f", {100 * (c['hit_rate'] or 0):.0f}% hit"
    n = len(c["times_s"])
    runs = f" ({n} run{'s' if n > 1 else ''})" if n < rounds else ""
    return f"{_seconds(c['median_s'])}{runs} · {comp:.0f}/{jobs:.0f}{hits}{flag}"


def table(result: dict[str, Any]) -> str:
    """One code base: a row per scenario, a cell per configuration, then the ratios."""
    head = ["scenario", *(f"({c.key}) {c.label}" for c in CONFIGS),
            "(d)/(c)", "(e)/(c)", "(e)/(a)"]  # fmt: skip
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, scen in result["scenarios"].items():
        cfgs = scen["configs"]
        med = {k: v["median_s"] for k, v in cfgs.items()}
        runs = f" ({scen['rounds']} runs)" if scen["rounds"] > 1 else ""
        cells = [f"{name}{runs}", *(_cell(cfgs[c.key], c.counted, scen["rounds"]) for c in CONFIGS)]
        cells += [f"{med['d'] / med['c']:.2f}", f"{med['e'] / med['c']:.2f}",
                  f"{med['e'] / med['a']:.2f}"]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def markdown(results: list[dict[str, Any]], chart: str | None) -> str:
    """The generated part of the docs section."""
    first = results[0]
    tools = first.get("tools", {})
    parts = [
        f"Measured on {first['machine'].get('cpu', '')} "
        f"({first['machine']['usable_cpus']} usable CPUs), {tools.get('clang', '')}, "
        f"{tools.get('cached-dist', '')}; each code base's date and command under its name "
        "(they may come from different runs). Raw results: `benchmarks/results/real-*.json`.",
        "",
        "Each cell: median link wall time · backend compilations / backend jobs per link, "
        "hit rate (compilations counted by the remote-compiler wrapper; (a) has no remote "
        "compiler and no cache, so its compilations are its jobs). ⚠ marks an output that "
        "differed from (b)'s or failed its smoke test. Ratios are of median link times.",
        "",
        "Scenarios: " + "; ".join(f"**{k}**: {v}" for k, v in SCENARIOS.items()) + ".",
    ]
    if chart:
        parts += ["", f"![hit rates and warm link times per configuration]({chart})"]
    for r in results:
        parts += ["", f"## {r['codebase']} ({r['package']} {r.get('version', '')})", "",
                  f"Measured {r['date']}; command `{r['command']}`. "
                  f"{r['language']}, built by {r['build_system']}; links {r['program']}. "
                  f"Build by its build system: {r.get('build_s', 0):.0f} s. Edits: leaf "
                  f"`{r['edits']['leaf']}`, hub `{r['edits']['hub']}`.", "", table(r)]  # fmt: skip
    return "\n".join(parts)


def chart(results: list[dict[str, Any]], path: Path) -> None:
    """Hit rates (all scenarios) and median warm-link times, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(14, 3.6 * len(results)), squeeze=False)
    width = 0.8 / len(CONFIGS)
    for row, r in zip(axes, results, strict=True):
        names = list(r["scenarios"])
        warm = [n for n in names if n in WARM]
        for i, c in enumerate(CONFIGS):
            hits = [100 * (r["scenarios"][n]["configs"][c.key]["hit_rate"] or 0) for n in names]
            xs = [x + i * width for x in range(len(names))]
            row[0].bar(xs, hits, width, label=f"({c.key}) {c.label}")
            times = [r["scenarios"][n]["configs"][c.key]["median_s"] for n in warm]
            row[1].bar([x + i * width for x in range(len(warm))], times, width)
        when = str(r["date"])[:10]  # results of several runs may stand side by side
        row[0].set_title(f"{r['codebase']} ({when}): backend jobs not compiled (hit rate, %)")
        row[0].set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names,
                          rotation=30, ha="right", fontsize=8)  # fmt: skip
        row[0].set_ylim(0, 105)
        row[1].set_title(f"{r['codebase']} ({when}): warm link wall time (median, s, log scale)")
        row[1].set_yscale("log")
        row[1].set_xticks([x + 0.4 - width / 2 for x in range(len(warm))], warm,
                          rotation=30, ha="right", fontsize=8)  # fmt: skip
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def update_docs(generated: str, docs: Path = DOCS, begin: str = BEGIN, end: str = END) -> None:
    """Replaces the generated block between ``begin`` and ``end`` (by default the "Real code
    bases" section's), which must exist."""
    text = docs.read_text()
    if begin not in text or end not in text:
        raise RuntimeError(f"{docs} has no {begin} ... {end} block to fill")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    docs.write_text(f"{head}{begin}\n{generated}\n{end}{tail}")
