"""Whether a link's modules name their source by an absolute path inside the checkout, which
checkouts at other paths cannot share: the hint ``--verbose`` prints and the count ``stats``
shows.

A module's ``source_filename`` is read from its bitcode (bitcode/source_name.py) for each
compiled job, as it finishes (beside a compile, the read costs nothing), and with
``--verbose`` for every job. A full hit without --verbose reads nothing. Which absolute
names are inside the checkout is the launcher's own answer (it would rewrite them), asked
once per link: a source outside it, such as CMake's compiler checks in /usr/share, is the
same path on every machine and no reason to worry.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..jobfile import Job

#: Where the hint sends the reader: the launcher, and the guide's section about it.
REMEDY = ("compile through the launcher cached-dist-cc (`cached-dist flags --launcher`; "
          "see \"Sharing a cache\" in the guide)")  # fmt: skip


class SourcePaths:
    """The source path each module was compiled from, as far as it has been read."""

    __slots__ = ("compiled", "inside", "names")

    def __init__(self) -> None:
        self.names: dict[int, str | None] = {}  # job index -> source_filename (None: unknown)
        self.compiled: list[Job] = []  # the jobs compiled by this link, as they ended
        self.inside: dict[str, bool] = {}  # absolute name -> inside the checkout

    def read(self, job: Job) -> str | None:
        """The source name of the job's module (None: unknown), read once; never raises."""
        if job.index in self.names:
            return self.names[job.index]
        from ..bitcode.source_name import source_filename
        from ..keys.digests import read_regular

        try:
            name = source_filename(read_regular(job.module))
        except OSError:  # gone, or LLD 21's name of an archive member: not a file
            name = None
        self.names[job.index] = name
        return name

    def note(self, job: Job) -> None:
        """A job this link compiled: its source name is read now."""
        self.read(job)
        self.compiled.append(job)

    def in_checkout(self, jobs: Sequence[Job]) -> list[str]:
        """The source names of ``jobs`` that are absolute paths inside the checkout."""
        names = [self.read(job) for job in jobs]
        absolute = [n for n in names if n is not None and n.startswith("/")]
        asked = [n for n in dict.fromkeys(absolute) if n not in self.inside]
        if asked:
            self.inside.update(_inside(asked))
        return [n for n in absolute if self.inside[n]]

    def hint(self, jobs: Sequence[Job]) -> str | None:
        """The --verbose line when modules of ``jobs`` name their source inside the checkout
        by absolute path."""
        found = self.in_checkout(jobs)
        if not found:
            return None
        more = ", ..." if len(found) > 1 else ""
        return (f"{len(found)} of {len(jobs)} modules were compiled from absolute source paths "
                f"({found[0]}{more}): checkouts at other paths will not share their results; "
                f"{REMEDY}")  # fmt: skip


def _inside(names: list[str]) -> dict[str, bool]:
    """Which of the absolute ``names`` the launcher would rewrite from this directory (the
    link's, in the build tree), with this environment: those inside the checkout. Without a
    launcher to ask, every one."""
    import shlex
    import subprocess

    from ..launcher import LAUNCHER

    try:
        done = subprocess.run([LAUNCHER, "--print", "--", "cc", *names], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
        words = shlex.split(done.stdout)[1:] if done.returncode == 0 else []
    except (OSError, ValueError, subprocess.SubprocessError):
        words = []
    if len(words) != len(names):
        return dict.fromkeys(names, True)
    return {name: word != name for name, word in zip(names, words, strict=True)}
