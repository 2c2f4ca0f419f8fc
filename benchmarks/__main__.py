"""Hit rates and link times on real code bases, five ways of linking side by side.

    python -m benchmarks run [--quick] [--only NAME] [--rounds N]
    python -m benchmarks report
    python -m benchmarks history [--repo PATH] [--range REVS | --last N] [--quick]

`run` fetches each code base's Debian source package, builds it with its own build system
with ThinLTO and DTLTO flags injected, then links it under every scenario with each
configuration: (a) in-process ThinLTO, (b) DTLTO with a bare distributor, (c) DTLTO with
LLD's --thinlto-cache-dir, (d) cached-dist wrapping (b)'s distributor, (e) cached-dist's
own runner. Raw results go to benchmarks/results/real-NAME.json; a full run (not --quick)
also rewrites the generated part of docs/benchmarks/real-code-bases.md and the chart
docs/benchmark-chart.png. `report` does only that last step, from saved results.
`history` replays a real project's commits with persistent caches (benchmarks/history.py).
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import history
from .cache_link import byte_compile
from .harness import report
from .harness.codebases import CODEBASES
from .harness.runner import Bench, tool_versions
from .sources import WORK, machine

RESULTS = Path(__file__).parent / "results"


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def source_version(package: str) -> str:
    dsc = sorted((WORK / "src" / package).glob("*.dsc"))
    return dsc[-1].stem.split("_", 1)[1] if dsc else "unknown"


def result_path(name: str, quick: bool) -> Path:
    return RESULTS / f"real-{name}{'.quick' if quick else ''}.json"


def write_report(names: list[str]) -> None:
    """Regenerates the docs block and the chart from the full-run results on disk."""
    results: list[dict[str, Any]] = []
    for name in names:
        path = result_path(name, quick=False)
        if path.exists():
            results.append(json.loads(path.read_text()))
    if not results:
        say("no full-run results to report")
        return
    report.chart(results, report.CHART)
    report.update_docs(report.markdown(results, "../benchmark-chart.png"))
    say(f"wrote {report.DOCS} and {report.CHART}")


def run(args: argparse.Namespace) -> int:
    names = [args.only] if args.only else (["lua"] if args.quick else list(CODEBASES))
    rounds = args.rounds or (1 if args.quick else 3)
    base = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": {**machine(), "cpu": cpu_model()}, "tools": tool_versions(),
            "command": "python -m benchmarks " + " ".join(sys.argv[1:] or ["run"]),
            "quick": args.quick}  # fmt: skip
    byte_compile()  # as when installed
    for name in names:
        cb = CODEBASES[name]
        bench = Bench(
            cb,
            WORK / "real" / name,
            rounds=rounds,
            cold_rounds=1 if args.quick else min(rounds, 2, cb.max_cold_rounds or 2),
            concurrency=[2] if args.quick else list(cb.concurrency),
            progress=say,
            uncached_rounds=cb.uncached_rounds,
        )
        bench.run()
        result = {**base, **bench.as_json(), "version": source_version(cb.package)}
        RESULTS.mkdir(exist_ok=True)
        result_path(name, args.quick).write_text(json.dumps(result, indent=1) + "\n")
        print(report.table(result), flush=True)
    if not args.quick:
        write_report(list(CODEBASES))
    return 0


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=raw
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="build the code bases and measure every scenario")
    p.add_argument(
        "--quick",
        action="store_true",
        help="lua only, one round, 2 concurrent links (not 4): a smoke run",
    )
    p.add_argument("--only", choices=sorted(CODEBASES), help="measure only this code base")
    p.add_argument("--rounds", type=int, help="rounds of warm scenarios (default 3; quick 1)")
    sub.add_parser("report", help="regenerate the docs table and chart from saved results")
    h = sub.add_parser("history", help="backend compiles across a real commit history",
                       description=history.__doc__, formatter_class=raw)  # fmt: skip
    history.add_arguments(h)
    args = parser.parse_args(argv)
    if args.command == "report":
        write_report(list(CODEBASES))
        return 0
    if args.command == "history":
        byte_compile()  # as when installed
        return history.main(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
