"""The history replay's figures: totals per configuration and machine, the docs block and
the chart of cumulative backend compiles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import report

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs" / "benchmarks" / "history.md"
CHART = ROOT / "docs" / "history-chart.png"
BEGIN, END = "<!-- history:begin -->", "<!-- history:end -->"
MACHINES = ("CI", "developer")


def _jobs(build: dict[str, Any]) -> int | None:
    """A commit's backend jobs: (a)'s distributor sees only LLD's misses, so the count is
    the other links' (all link the same objects the same way)."""
    for key in ("b", "c", "d"):
        jobs = build["links"].get(key, {}).get("summary", {}).get("jobs")
        if jobs:
            return int(jobs)
    return None


def builds(results: dict[str, Any], machine: str) -> list[tuple[int, dict[str, Any]]]:
    return [(row["index"], row["builds"][machine]) for row in results["commits"]
            if machine in row["builds"]]  # fmt: skip


def totals(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per machine and configuration: links, jobs, compiles, hit rate, backend times."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for machine in MACHINES:
        per: dict[str, dict[str, Any]] = {}
        for key in results["configs"]:
            t: dict[str, Any] = {"links": 0, "failed": 0, "jobs": 0, "compiles": 0,
                                 "compile_cpu_s": 0.0, "compile_real_s": 0.0, "link_s": 0.0,
                                 "remote_hits": 0, "hits_with_shard_path": 0}  # fmt: skip
            for _, build in builds(results, machine):
                link = build.get("links", {}).get(key)
                if link is None:
                    continue
                if not link["ok"]:
                    t["failed"] += 1
                    continue
                t["links"] += 1
                t["jobs"] += _jobs(build) or 0
                t["compiles"] += link["compiles"]
                for name in ("compile_cpu_s", "compile_real_s"):
                    t[name] += link[name]
                t["link_s"] += link["seconds"]
                for name in ("remote_hits", "hits_with_shard_path"):
                    t[name] += link.get("summary", {}).get(name, 0)
            t["hit_rate"] = 1 - t["compiles"] / t["jobs"] if t["jobs"] else None
            per[key] = t
        out[machine] = per
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def table(results: dict[str, Any]) -> str:
    """A row per configuration: compiles / jobs, hit rate and backend time per machine."""
    t = totals(results)
    head = ["configuration"]
    for m in MACHINES:
        n = len(builds(results, m))
        head += [f"{m} ({n} builds): compiles / jobs", f"{m}: hit rate",
                 f"{m}: backend compile time (CPU)"]  # fmt: skip
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, label in results["configs"].items():
        cells = [f"({key}) {label}"]
        for m in MACHINES:
            c = t[m][key]
            failed = f" ({c['failed']} failed)" if c["failed"] else ""
            cells += [f"{c['compiles']:,} / {c['jobs']:,}{failed}", _pct(c["hit_rate"]),
                      _minutes(c["compile_cpu_s"])]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _checks(results: dict[str, Any]) -> list[str]:
    """What the replay checked about the programs, in words."""
    lines = []
    differ, smoke_failed, verified, mismatches, recompiled, killed = [], 0, 0, 0, 0, []
    suites: dict[str, list[str]] = {"passed": [], "failed": [], "not run": []}
    for m in MACHINES:
        for index, build in builds(results, m):
            if build["status"] == "skipped":
                continue
            if not build.get("identical", False):
                differ.append(f"{m} #{index + 1}")
            smoke_failed += sum(not link.get("smoke_ok") for link in build["links"].values()
                                if link["ok"])  # fmt: skip
            killed += [f"{m} #{index + 1} ({k})" for k, link in build["links"].items()
                       for _ in range(link.get("killed_attempts", 0))]  # fmt: skip
            v = build.get("verification")
            if v:
                verified += 1
                differ += [
                    f"{m} #{index + 1} ({k}) vs reference"
                    for k, same in v["identical_to_reference"].items()
                    if not same
                ]
                recompiled += v["verify_hits"].get("verified", 0)
                mismatches += v["verify_hits"].get("mismatches", 0)
                if not v["verify_hits"]["ok"] or not v["verify_hits"]["identical"]:
                    differ.append(f"{m} #{index + 1} --verify-hits link")
            s = build.get("suite")
            if s:
                first = next(iter(s.values()))
                where = f"{m} #{index + 1}"
                if not first.get("ran"):
                    suites["not run"].append(f"{where} ({first.get('reason')})")
                else:
                    suites["passed" if all(x.get("ok") for x in s.values()) else "failed"].append(
                        where
                    )
    lines.append(
        "Programs: at every build the four configurations' programs were "
        + ("byte-identical" if not differ else f"NOT all identical ({', '.join(differ)})")
        + f", and {'every one' if not smoke_failed else f'all but {smoke_failed}'} ran the "
        "smoke script."
    )
    lines.append(
        f"Verification ({verified} builds, every {results['plan']['verify_every']}th commit "
        "on each machine that built it): the programs compared with an uncached link's (or "
        "with (d)'s, when its link had compiled every job), and relinked with "
        "`--verify-hits=1` (an extra link, not counted above: (b) on the CI machine, (c) on "
        f"the developer's): {recompiled:,} hits recompiled, {mismatches} mismatches."
    )
    if killed:
        lines.append(
            f"Links whose distributor was killed by SIGKILL from outside the replay (on a "
            f"machine shared with other work), then linked again: {', '.join(killed)}; the "
            "compiles of both attempts are counted."
        )
    ran = len(suites["passed"]) + len(suites["failed"])
    lines.append(
        f"Lua's test suite (`testes/all.lua`, every {results['plan']['suite_every']}th "
        f"commit): ran at {ran} builds, passed at {len(suites['passed'])}"
        + (f", failed at {', '.join(suites['failed'])}" if suites["failed"] else "")
        + (f"; not run at {', '.join(suites['not run'])}" if suites["not run"] else "")
        + "."
    )
    return lines


def differences(results: dict[str, Any]) -> list[str]:
    """Builds where (a) and (b), which should compile alike, did not: "CI #117 (a 2, b 1)"."""
    found = []
    for machine in MACHINES:
        for index, build in builds(results, machine):
            links = build.get("links", {})
            a, b = links.get("a"), links.get("b")
            if a and b and a["ok"] and b["ok"] and a["compiles"] != b["compiles"]:
                found.append(f"{machine} #{index + 1} (a {a['compiles']}, b {b['compiles']})")
    return found


def markdown(results: dict[str, Any], chart: str | None) -> str:
    """The generated part of the docs section."""
    repo, tools, t = results["repository"], results.get("tools", {}), totals(results)
    n = len(results["commits"])
    skipped = [f"#{row['index'] + 1} {row['sha'][:10]} ({b.get('reason')})"
               for row in results["commits"] for m, b in row["builds"].items()
               if b["status"] == "skipped" and m == "CI"]  # fmt: skip
    front = sum(len(b["front_end"]["recompiled"]) for _, b in builds(results, "CI")
                if b["status"] != "skipped")  # fmt: skip
    dev_a, dev_c = t["developer"]["a"]["compiles"], t["developer"]["c"]["compiles"]
    parts = [
        f"Measured {results['date']} on {results['machine'].get('cpu', '')} "
        f"({results['machine']['usable_cpus']} usable CPUs, shared with other work: times "
        f"are under load), {tools.get('clang', '')}, {tools.get('cached-dist', '')} at "
        f"{results.get('code', 'an unrecorded commit')}; command "
        f"`{results['command']}`, {n} first-parent commits of `{repo['branch']}`, "
        f"`{repo['range']}` ({repo['first'][:10]} to {repo['last'][:10]}); whole replay "
        f"{_minutes(results.get('wall_s', 0))}. Raw results: "
        f"`benchmarks/results/{results.get('file', 'history.json')}`.",
        "",
        table(results),
        "",
        f"- The developer machine with the shared tier (c) compiled {dev_c:,} backend jobs, "
        f"against {dev_a:,} with LLD's cache (a)"
        + (f" ({100 * dev_c / dev_a:.1f}%)." if dev_a else "."),
        f"- (d) with ccache's default options (the shard's path, which holds LLD's process "
        f"id, in the key): {t['CI']['d']['hits_with_shard_path'] + t['developer']['d']['hits_with_shard_path']} hits "  # noqa: E501
        "on both machines.",
        f"- The front end: make recompiled {front:,} objects over the CI machine's builds "
        f"({front / max(1, n):.1f} a commit).",
        "- Commits that did not build: "
        + ("; ".join(skipped) if skipped else "none") + ".",
        "- Builds where LLD's cache (a) and cached-dist (b) compiled different numbers of "
        "jobs: " + (", ".join(differences(results)) or "none") + ".",
        *[f"- {line}" for line in _checks(results)],
    ]  # fmt: skip
    if chart:
        parts += ["", f"![cumulative backend compiles over the replayed commits]({chart})"]
    return "\n".join(parts)


def chart(results: dict[str, Any], path: Path) -> None:
    """Cumulative backend compiles over the commits, a panel per machine and a line per
    configuration; lines that coincide are drawn wide to narrow, so each stays visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    widths = dict(zip(results["configs"], (9, 5.5, 2.2, 2.2), strict=False))
    n = len(results["commits"])
    for ax, machine in zip(axes, MACHINES, strict=True):
        ends: dict[int, list[str]] = {}  # final total -> configurations that end there
        for i, (key, label) in enumerate(results["configs"].items()):
            xs, ys, total = [0], [0], 0
            for index, build in builds(results, machine):
                link = build.get("links", {}).get(key)
                if link and link["ok"]:
                    total += link["compiles"]
                xs.append(index + 1)
                ys.append(total)
            xs.append(n)
            ys.append(total)
            ax.plot(xs, ys, color=f"C{i}", lw=widths.get(key, 2), alpha=0.75,
                    drawstyle="steps-post", label=f"({key}) {label}")  # fmt: skip
            ends.setdefault(total, []).append(f"({key})")
        for total, keys in ends.items():
            ax.annotate(f"{' '.join(keys)} {total:,}", (n, total), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7)  # fmt: skip
        every = "every commit" if machine == "CI" else (
            f"every {results['plan']['developer_every']}th commit")  # fmt: skip
        ax.set_title(f"{machine} machine: builds {every}", fontsize=10)
        ax.set_ylabel("backend compiles, cumulative")
        ax.grid(alpha=0.3)
        ax.set_xlim(0, n * 1.08)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[1].set_xlabel(f"commits replayed ({results['repository']['range']}, oldest first)")
    fig.suptitle(f"Backend compiles over {n} commits of {results['repository']['branch']}, "
                 "caches persisting across commits", fontsize=11)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def thin_section(thin: dict[str, Any]) -> str:
    """The same replay with a thin archive, whose shards keep their members' paths."""
    extra = []
    for machine in MACHINES:
        more = [f"#{i + 1}" for i, b in builds(thin, machine) if b["status"] != "skipped"
                and {"b", "d"} <= set(b["links"])
                and b["links"]["d"]["compiles"] > b["links"]["b"]["compiles"]]  # fmt: skip
        if more:
            extra.append(f"{machine} at {len(more)} of its builds ({', '.join(more[:12])}"
                         + (", ..." if len(more) > 12 else "") + ")")  # fmt: skip
    return "\n".join([
        f"With a thin archive (`{thin['command']}`, measured {thin['date']}, the same "
        f"{len(thin['commits'])} commits; `liblua.a` made by `llvm-ar rcT`, whose shards "
        "keep each member's path instead of a per-link name):",
        "",
        table(thin),
        "",
        "- Builds where the raw-shard keys (d) compiled more than cached-dist (b): "
        + ("; ".join(extra) if extra else "none") + ".",
    ])  # fmt: skip


def write(
    results: dict[str, Any],
    thin: dict[str, Any] | None = None,
    docs: Path = DOCS,
    chart_path: Path = CHART,
) -> None:
    """The chart and the docs block, from a run's results (and a thin-archive run's)."""
    chart(results, chart_path)
    link = os.path.relpath(chart_path, docs.parent)
    text = markdown(results, link)
    if thin is not None:
        text += "\n\n" + thin_section(thin)
    report.update_docs(text, docs, BEGIN, END)
