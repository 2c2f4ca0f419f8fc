"""Interleaved timing: every configuration runs once per round, so drift hits all alike."""

import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Measured:
    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def timed(cmd: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return elapsed


def interleave(
    configs: Mapping[str, Callable[[], float]], rounds: int, progress: Callable[[str], None]
) -> dict[str, Measured]:
    """Runs each config's thunk once per round, in a rotating order."""
    results = {name: Measured() for name in configs}
    names = list(configs)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            progress(f"round {r + 1}/{rounds}: {name}")
            results[name].times.append(configs[name]())
    return results
