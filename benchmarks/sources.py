"""Real code bases from Debian source packages, fetched at run time with apt-get.

Only the upstream tarball is unpacked: the code is built by its own build system, not by
Debian's packaging and not by a script of ours.
"""

import glob
import os
import re
import subprocess
import tarfile
from pathlib import Path

WORK = Path(__file__).parent / "work"
SOURCES_DIR = Path("/etc/apt/sources.list.d")
DEB_SRC = SOURCES_DIR / "cached-dist-deb-src.sources"


def _has_deb_src() -> bool:
    for path in [Path("/etc/apt/sources.list"), *SOURCES_DIR.glob("*")]:
        try:
            text = path.read_text()
        except OSError:
            continue
        if "deb-src" in text and any(
            line.strip().startswith(("deb-src", "Types: deb-src")) or
            (line.startswith("Types:") and "deb-src" in line)
            for line in text.splitlines()
        ):  # fmt: skip
            return True
    return False


def ensure_deb_src() -> None:
    """Adds a deb-src twin of each Debian stanza when the machine has none, then updates."""
    if _has_deb_src():
        return
    stanzas = (SOURCES_DIR / "debian.sources").read_text()
    DEB_SRC.write_text(stanzas.replace("Types: deb\n", "Types: deb-src\n"))
    subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)


def ensure_packages(packages: tuple[str, ...]) -> None:
    """Installs whichever of ``packages`` (Debian packages a build system needs: libraries
    its configure looks for) the machine lacks, so the job count does not depend on it."""
    missing = [p for p in packages if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
    ).stdout != "install ok installed"]  # fmt: skip
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, capture_output=True)
    got = subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *missing],
                         capture_output=True, text=True, env=env)  # fmt: skip
    if got.returncode != 0:
        raise RuntimeError(f"apt-get install {' '.join(missing)} failed: {got.stderr[-300:]}")


def _older_versions(package: str) -> list[str]:
    """Every version of ``package``'s source the archive lists, newest first after the
    first: a mirror can list a security update whose files it no longer serves (404)."""
    shown = subprocess.run(["apt-cache", "showsrc", package], capture_output=True, text=True)
    versions = [line.split(":", 1)[1].strip() for line in shown.stdout.splitlines()
                if line.startswith("Version:")]  # fmt: skip
    ordered = sorted(set(versions), key=_version_key, reverse=True)
    return ordered[1:]


def _version_key(version: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", version)]


def fetch(package: str) -> Path:
    """Downloads ``package``'s source (once) and returns its unpacked upstream tree."""
    dest = WORK / "src" / package
    done = dest / ".unpacked"
    if done.exists():
        return next(p for p in dest.iterdir() if p.is_dir())
    dest.mkdir(parents=True, exist_ok=True)
    if not glob.glob(str(dest / "*.orig.tar.*")):
        ensure_deb_src()
        got = subprocess.run(
            ["apt-get", "source", "--download-only", package],
            cwd=dest, capture_output=True, text=True,
        )  # fmt: skip
        for version in _older_versions(package) if got.returncode != 0 else []:
            got = subprocess.run(
                ["apt-get", "source", "--download-only", f"{package}={version}"],
                cwd=dest, capture_output=True, text=True,
            )  # fmt: skip
            if got.returncode == 0:
                break
        if got.returncode != 0:
            raise RuntimeError(f"apt-get source {package} failed: {got.stderr.strip()[-300:]}")
    (tarball,) = glob.glob(str(dest / "*.orig.tar.*"))
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    done.touch()
    return next(p for p in dest.iterdir() if p.is_dir())


def machine() -> dict[str, object]:
    """What the figures were measured on, saved beside them."""
    import platform

    clang = subprocess.run(
        ["/usr/lib/llvm-22/bin/clang", "--version"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    return {
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "clang": clang,
    }
