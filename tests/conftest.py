"""What every test's links run with: no warm server started behind the suite's back.

A link through cached-dist-client (the distributor `cached-dist flags` prints) that finds no
server starts one once it is done (cached_dist/serve/autostart.py), which would outlive the
test and serve the next test's links. So the whole session runs with CACHED_DIST_NO_SERVER=1
and a socket of its own that no server listens on (nor one the user may run on the default
socket). Tests of the auto-start (tests/test_autostart.py) take both out for their own links,
each with a socket in its own directory, and stop what they started.
"""

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_warm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CACHED_DIST_NO_SERVER", "1")
        patch.setenv("CACHED_DIST_SOCKET", str(tmp_path_factory.mktemp("sock") / "none.sock"))
        yield
