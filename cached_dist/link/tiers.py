"""Remote tiers behind the local store: one batched lookup per link, uploads beside the link.

The chain is local store -> each ``--remote-storage`` URL in order. Local misses are looked
up in the remotes in one batch per remote (a Redis MGET, or concurrent GETs on kept-alive HTTP
connections); a remote value is re-hashed as it is decoded, written to the job's outputs and
promoted into the local store, so the next link hits locally. Results compiled here are
uploaded (unless read-only) by one background thread, each the moment its job is stored, so
the link does not wait for the network while it still compiles; the thread is joined, with a
bound, when the link ends.

Cross-machine single-flight: on the first remote that supports claims (Redis), a key this link
claimed locally is also claimed remotely (``SET NX PX``), in one batch; a claim held by
another machine makes the key "theirs" (polled like a key another local link compiles). Held
claims are renewed by a small thread and released with the upload of their value.

A remote never fails a link: its first error or timeout marks it failed for the rest of the
link, with one warning, counted as ``remote_errors``.
"""

from __future__ import annotations

import contextlib
import os
import threading

from ..keys.key import KEY_FORMAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from store import Store
    from store.remote import RemoteStorage

    from ..keys.compute import Keyed
    from ..log import Log
    from ..options import Options

#: A remote claim's lease; a machine that died holding it is taken over after this long.
LEASE_MS = 15_000
_RENEW_EVERY = LEASE_MS / 3000
#: Longest the end of a link waits for uploads still in flight (each is also bounded by
#: --remote-timeout, and a timeout drops the remote for the rest).
UPLOAD_BOUND = 30.0


def output_roles(k: Keyed) -> dict[str, str]:
    return {f"output{i}": path for i, path in enumerate(k.job.outputs)}


class Remote:
    """One configured remote, opened on first use; ``failed`` once it erred in this link."""

    __slots__ = ("backend", "failed", "url")

    def __init__(self, url: str) -> None:
        from store.remote import redact

        self.url = redact(url)
        self.backend: RemoteStorage | None = None
        self.failed = False


class Tiers:
    """The remotes of one link and what the link did with them (the ``remote_*`` counters)."""

    def __init__(self, options: Options, log: Log, store: Store) -> None:
        self._urls = list(options.remote_storage)
        self.remotes = [Remote(url) for url in self._urls]
        self.read_only = options.remote_read_only
        self.connect_timeout = options.remote_connect_timeout
        self.timeout = options.remote_timeout
        self.log = log
        self.store = store
        self.token = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(8).hex()}"
        self.counters = dict.fromkeys(
            ("remote_hits", "remote_misses", "remote_errors", "remote_corrupt",
             "remote_uploads", "remote_bytes_downloaded", "remote_bytes_uploaded",
             "remote_round_trips"), 0,
        )  # fmt: skip
        self._held: dict[str, Remote] = {}  # key -> the remote holding our claim on it
        self._lock = threading.Lock()
        self._queue: list[tuple[str, dict[str, str], dict[str, object]] | None] = []
        self._wake = threading.Condition(self._lock)
        self._uploader: threading.Thread | None = None
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    # -- remotes --------------------------------------------------------------------------

    def _backend(self, i: int) -> RemoteStorage | None:
        remote = self.remotes[i]
        if remote.failed:
            return None
        if remote.backend is None:
            from store.remote import RemoteError, open_remote

            try:
                remote.backend = open_remote(
                    self._urls[i], connect_timeout=self.connect_timeout, timeout=self.timeout
                )
            except RemoteError as e:
                self._fail(remote, str(e))
                return None
        return remote.backend

    def _fail(self, remote: Remote, message: str) -> None:
        with self._lock:
            if remote.failed:
                return
            remote.failed = True
            self.counters["remote_errors"] += 1
        self.log.warn(f"remote {remote.url}: {message}; continuing without it")

    def _claims_remote(self) -> int | None:
        """Index of the remote that carries claims (the first that can), or None."""
        if self.read_only:
            return None  # read-only clients write nothing, claims included
        for i, url in enumerate(self._urls):
            if url.partition("://")[0].lower() in ("redis", "rediss"):
                return i
        return None

    # -- lookups --------------------------------------------------------------------------

    def fetch(
        self, misses: list[Keyed], on_hit: Callable[[Keyed, int, float], None], *, first: bool
    ) -> list[Keyed]:
        """Serves what the remotes hold (one batch per remote); returns what is still missing.

        ``on_hit(k, bytes, compile seconds saved)`` accounts each hit; ``first`` counts the
        rest as remote misses (later polls for keys another machine compiles do not)."""
        from store.remote import RemoteError, entry

        pending = [k for k in misses if k.key is not None]
        served: set[int] = set()
        for i, remote in enumerate(self.remotes):
            todo = [k for k in pending if k.job.index not in served]
            backend = self._backend(i) if todo else None
            if backend is None:
                continue
            try:
                values = backend.get_many([k.key for k in todo])  # type: ignore[misc]
            except RemoteError as e:
                self._fail(remote, str(e))
                continue
            for k, value in zip(todo, values, strict=True):
                if value is None:
                    continue
                self.counters["remote_bytes_downloaded"] += len(value)
                decoded = entry.decode(value)
                roles = output_roles(k)
                if decoded is None or set(decoded[0]) != set(roles):
                    self.counters["remote_corrupt"] += 1
                    self.log.detail(f"remote {remote.url}: damaged value for {k.key}; a miss")
                    continue
                outputs, meta = decoded
                if not self._write_outputs(roles, outputs):
                    continue
                duration = meta.get("duration", 0.0)
                seconds = float(duration) if isinstance(duration, int | float) else 0.0
                self.store.put(
                    k.key, roles, duration=seconds, toolchain=k.toolchain,  # type: ignore[arg-type]
                    key_version=KEY_FORMAT,
                )  # fmt: skip
                served.add(k.job.index)
                self.counters["remote_hits"] += 1
                self.log.detail(f"hit  {k.key} {k.job.module} (remote {remote.url})")
                on_hit(k, sum(len(b) for b in outputs.values()), seconds)
        if first:
            self.counters["remote_misses"] += len(pending) - len(served)
        return [k for k in misses if k.job.index not in served]

    @staticmethod
    def _write_outputs(roles: dict[str, str], outputs: dict[str, bytes]) -> bool:
        """Each output written whole to a temporary file and renamed into place."""
        for role, dest in roles.items():
            tmp = f"{dest}.cached-dist-{os.getpid()}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(outputs[role])
                os.replace(tmp, dest)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                return False  # compile it instead: the runner reports a real problem
        return True

    # -- claims ---------------------------------------------------------------------------

    def claim(self, ks: list[Keyed]) -> set[int]:
        """Claims ``ks`` (claimed locally already) on the claims remote, in one batch; returns
        the job indices another machine holds (or whose value just appeared): theirs."""
        i = self._claims_remote()
        wanted = [k for k in ks if k.key is not None]
        backend = self._backend(i) if i is not None and wanted else None
        if backend is None or i is None:
            return set()
        from store.remote import RemoteError

        try:
            granted = backend.claim_many([k.key for k in wanted], self.token, LEASE_MS)  # type: ignore[misc]
        except RemoteError as e:
            self._fail(self.remotes[i], str(e))
            return set()
        theirs = set()
        with self._lock:
            for k, ok in zip(wanted, granted, strict=True):
                if ok:
                    self._held[k.key] = self.remotes[i]  # type: ignore[index]
                else:
                    theirs.add(k.job.index)
        if len(theirs) < len(wanted):
            self._start_renewer()
        return theirs

    def _start_renewer(self) -> None:
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew, name="lease", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        from store.remote import RemoteError

        while not self._stop.wait(_RENEW_EVERY):
            with self._lock:
                by_remote: dict[int, list[str]] = {}
                for key, remote in self._held.items():
                    by_remote.setdefault(self.remotes.index(remote), []).append(key)
            for i, keys in by_remote.items():
                backend = self.remotes[i].backend
                if backend is None or self.remotes[i].failed:
                    continue
                try:
                    backend.renew(keys, self.token, LEASE_MS)
                except RemoteError as e:
                    self._fail(self.remotes[i], str(e))

    # -- uploads --------------------------------------------------------------------------

    def stored(self, k: Keyed, seconds: float) -> None:
        """The job was compiled here and stored locally: upload it, then drop its claim."""
        if k.key is None:
            return
        if self.read_only:
            self.release(k)
            return
        meta = {"duration": float(seconds), "toolchain": k.toolchain, "key_version": KEY_FORMAT}
        self._enqueue((k.key, output_roles(k), meta))

    def release(self, k: Keyed) -> None:
        """Gives up our remote claim on ``k`` (its job failed or was not stored)."""
        if k.key is not None and k.key in self._held:
            self._enqueue((k.key, {}, {}))

    def _enqueue(self, item: tuple[str, dict[str, str], dict[str, object]]) -> None:
        with self._wake:
            self._queue.append(item)
            self._wake.notify()
        if self._uploader is None:
            self._uploader = threading.Thread(target=self._upload, name="upload", daemon=True)
            self._uploader.start()

    def _upload(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                item = self._queue.pop(0)
            if item is None:
                return
            try:
                self._upload_one(*item)
            except Exception as e:  # a bug here must not hang or fail the link
                self._fail(self.remotes[0], f"upload failed ({type(e).__name__}: {e})")

    def _upload_one(self, key: str, roles: dict[str, str], meta: dict[str, object]) -> None:
        from store.remote import RemoteError, entry

        with self._lock:
            holder = self._held.pop(key, None)
        value = None
        if roles:
            try:
                outputs = {}
                for role, path in roles.items():
                    with open(path, "rb") as f:
                        outputs[role] = f.read()
                value = entry.encode(outputs, meta)
            except OSError:
                value = None  # the link removed or replaced it: nothing to share
        for i, remote in enumerate(self.remotes):
            release = self.token if holder is remote else None
            if (value is None and release is None) or remote.failed:
                continue
            backend = self._backend(i)
            if backend is None:
                continue
            try:
                if value is not None:
                    backend.put(key, value, release)
                    self.counters["remote_uploads"] += 1
                    self.counters["remote_bytes_uploaded"] += len(value)
                else:
                    backend.release([key], self.token)
            except RemoteError as e:
                self._fail(remote, str(e))

    # -- the end of the link --------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Waits (bounded) for uploads, releases what is still claimed; the link's counters."""
        if self._uploader is not None:
            with self._lock:
                leftover = list(self._held)
            for key in leftover:
                self._enqueue((key, {}, {}))
            with self._wake:
                self._queue.append(None)
                self._wake.notify()
            self._uploader.join(UPLOAD_BOUND)
            if self._uploader.is_alive():
                for remote in self.remotes:
                    self._fail(remote, f"uploads still running after {UPLOAD_BOUND:.0f} s")
        elif self._held:
            for key in list(self._held):
                self._upload_one(key, {}, {})
        self._stop.set()
        for remote in self.remotes:
            if remote.backend is not None:
                self.counters["remote_round_trips"] += remote.backend.round_trips
                self.log.detail(f"remote {remote.url}: {remote.backend.round_trips} round trips")
                remote.backend.close()
        return self.counters
