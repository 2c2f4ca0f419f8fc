"""What a warm server's child takes of its client before it runs the link (``_become``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

_CHILD = """
import json, os, subprocess, sys
from cached_dist.serve.server import _become
os.environ.update(GONE="1", SAME="same", CHANGED="old")  # the server's environment
env = {k: v for k, v in os.environ.items() if k != "GONE"}
env.update(CHANGED="new", ADDED="added")
where, out = sys.argv[1], sys.argv[2]
fds = [os.open(os.devnull, os.O_RDONLY), os.open(out, os.O_WRONLY | os.O_CREAT, 0o600),
       os.open(os.devnull, os.O_WRONLY), os.open(where, os.O_RDONLY)]
_become(fds, env, 0o027, 0)
seen = subprocess.run(["env", "-0"], capture_output=True, check=True).stdout  # execve's
umask = os.umask(0)
print(json.dumps({"want": env, "environ": dict(os.environ), "exec": seen.decode(),
                  "cwd": os.getcwd(), "umask": umask}))
"""


def test_the_child_takes_the_client_s_environment_directory_and_umask(tmp_path: Path) -> None:
    """Only the variables that differ are set or removed; what results is the client's
    environment exactly, as the link's own programs see it too."""
    where, out = tmp_path / "client-dir", tmp_path / "out.json"
    where.mkdir()
    subprocess.run([sys.executable, "-c", _CHILD, str(where), str(out)], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    got = json.loads(out.read_text())
    want = got["want"]
    assert "GONE" not in want and want["CHANGED"] == "new" and want["ADDED"] == "added"
    assert got["environ"] == want
    passed = dict(item.split("=", 1) for item in got["exec"].split("\0") if item)
    assert passed == want
    assert got["cwd"] == str(where) and got["umask"] == 0o027


_TWICE = """
import json, os, subprocess, sys
from cached_dist.serve.server import _become, _own_environment
if sys.argv[2] == "own":
    _own_environment()  # what the server does when it starts
env = dict(os.environ)  # a client with the server's environment: nothing to change
fds = [os.open(os.devnull, os.O_RDONLY), os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600),
       os.open(os.devnull, os.O_WRONLY), os.open(".", os.O_RDONLY)]
_become(fds, env, 0o022, 0)
seen = subprocess.run(["env", "-0"], capture_output=True, check=True).stdout
print(json.dumps({"environ": os.environ["TWICE"], "exec": [
    e.split("=", 1)[1] for e in seen.decode().split("\\0") if e.startswith("TWICE=")]}))
"""

_EXECVE = """
import ctypes, os, sys
args = [sys.executable.encode(), b"-c", sys.argv[1].encode(), sys.argv[2].encode(),
        sys.argv[3].encode(), None]
env = [b"TWICE=first", b"TWICE=second", b"PYTHONPATH=" + sys.argv[4].encode(),
       b"PATH=" + os.environ["PATH"].encode(), None]
libc = ctypes.CDLL(None, use_errno=True)
libc.execve(args[0], (ctypes.c_char_p * len(args))(*args), (ctypes.c_char_p * len(env))(*env))
raise SystemExit(f"execve: errno {ctypes.get_errno()}")
"""


def test_a_variable_inherited_twice_reaches_programs_as_the_child_sees_it(
    tmp_path: Path,
) -> None:
    """A server started with a variable named twice in its environment (execve allows it)
    makes its C environment os.environ's once: the programs a child runs then see that
    variable once, with the value the child sees; without that, both values would reach
    them (checked here too, so that the test shows what it guards against)."""
    got = {}
    for how in ("own", "as inherited"):
        out = tmp_path / f"{how}.json"
        subprocess.run([sys.executable, "-c", _EXECVE, _TWICE, str(out), how, str(ROOT)],
                       cwd=tmp_path, check=True)  # fmt: skip
        got[how] = json.loads(out.read_text())
    assert got["as inherited"]["exec"] == ["first", "second"]  # what the guard is for
    assert got["own"]["exec"] == [got["own"]["environ"]]
