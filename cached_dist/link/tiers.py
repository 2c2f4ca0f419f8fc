"""Remote tiers behind the local store: one batched lookup per link, uploads beside the link.

The chain is local store -> each ``--remote-storage`` URL in order. Local misses are looked
up in the remotes in one batch per remote (a Redis MGET, or concurrent GETs on kept-alive HTTP
connections); a remote value is re-hashed as it is decoded and must name the key it was
fetched for (store/entry.py: another key's value, however valid, is a miss, counted as
``remote_wrong_key``); only then is it written to the job's outputs and promoted into the
local store, so the next link hits locally. Results compiled here are uploaded (unless
read-only) by one background thread, each the moment its job is stored, so the link does not
wait for the network while it still compiles; the thread is joined, with a bound, when the
link ends.

Cross-machine single-flight: on the first remote that supports claims (Redis), a key this link
claimed locally is also claimed remotely (``SET NX PX``), in one batch; a claim held by
another machine makes the key "theirs" (polled like a key another local link compiles). Held
claims are renewed by a small thread and released with the upload of their value.

A remote never fails a link: its first error or timeout marks it failed for the rest of the
link, with one warning, counted as ``remote_errors`` (a server of a sharded tier alone: its
share of the keys are misses, store/remote/shards.py).

Uploads are compressed at ``--compression-level`` and, with ``--remote-signing-key``, signed
(store/entry.py); a link with a key uses only values whose MAC verifies and counts the rest
as ``remote_rejected``, with one warning per link. The shared memo's values are signed too:
a forged memo could make a job's key another job's, whose signed value would then be used.

A REAPI remote (grpc://, grpcs://, unix:; store/remote/reapi.py) stores each key as an Action
describing the job's compile: before a batch, it is told what each key stands for
(``_describe``). With ``--remote-executor`` and no ``--remote-storage``, the executor's own
cache is the remote tier.
"""

from __future__ import annotations

import os
import threading
import time

from ..keys.key import KEY_FORMAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from store import Store
    from store.tier import ClaimingTier, Tier

    from ..jobfile import JobFile
    from ..keys.compute import Keyed
    from ..log import Log
    from ..options import Options

#: A remote claim's lease; a machine that died holding it is taken over after this long.
LEASE_MS = 15_000
_RENEW_EVERY = LEASE_MS / 3000
#: Longest the end of a link waits for uploads still in flight (each is also bounded by
#: --remote-timeout, and a timeout drops the remote for the rest).
UPLOAD_BOUND = 30.0
#: How long the uploader waits for more results before a round trip (uploads batch up).
_GATHER = 0.02
#: What a REAPI remote tier adds to the link's counters (docs/reference.md, stats).
REAPI_COUNTERS = ("reapi_hits", "reapi_misses", "reapi_uploads", "reapi_bytes_downloaded",
                  "reapi_bytes_uploaded", "reapi_wrong_key", "reapi_corrupt")  # fmt: skip


_MEMO = b"CDM1"  # a remote memo value: this, then the remembered text (a shard digest)
_MEMO_SIGNED = b"CDM2"  # the same, then an HMAC-SHA256 tag (32 bytes) of its key and text
_HEX = frozenset("0123456789abcdef")
#: The remotes a warm server's child found failing in its attempt at this link, as
#: Tiers.failures() puts them: set by cached-dist-client (serve/client.c) for the link it then
#: does itself, which skips them with the warning the child would have given.
FAILED_ENV = "CACHED_DIST_FAILED_REMOTES"


def _is_memo_text(text: str) -> bool:
    """Whether ``text`` is what a memo remembers: ``canon:`` or ``raw:`` and 32 hex digits
    (checked without ``re``, which a remote link would otherwise import for this alone)."""
    kind, colon, digest = text.partition(":")
    return bool(colon) and kind in ("canon", "raw") and len(digest) == 32 and set(digest) <= _HEX


def _memo_key(namespace: str, key: str) -> str:
    return f"memo-{KEY_FORMAT}-{namespace}-{key}"


def _memo_tag(signing_key: bytes, memo_key: str, text: bytes) -> bytes:
    import hashlib
    import hmac

    return hmac.new(signing_key, b"cached-dist memo\0" + memo_key.encode() + b"\0" + text,
                    hashlib.sha256).digest()  # fmt: skip


def _memo_value(memo_key: str, text: str, signing_key: bytes | None) -> bytes:
    if signing_key is None:
        return _MEMO + text.encode()
    return _MEMO_SIGNED + text.encode() + _memo_tag(signing_key, memo_key, text.encode())


def _memo_text(value: bytes | None, memo_key: str, signing_key: bytes | None) -> str | bool:
    """The remembered text if ``value`` is a well-formed memo value (signed with
    ``signing_key``, when given), else False (a miss) or True (rejected: not so signed)."""
    if value is None:
        return False
    raw = b""
    if value.startswith(_MEMO_SIGNED) and len(value) > len(_MEMO_SIGNED) + 32:
        raw, tag = value[len(_MEMO_SIGNED) : -32], value[-32:]
        if signing_key is not None:
            import hmac

            if not hmac.compare_digest(_memo_tag(signing_key, memo_key, raw), tag):
                return True
    elif value.startswith(_MEMO):
        if signing_key is not None:
            return True
        raw = value[len(_MEMO) :]
    text = raw.decode("ascii", "replace")
    return text if _is_memo_text(text) else False


def read_signing_key(path: str) -> bytes:
    """The key in ``path`` (checked by the option's parser), without a trailing newline."""
    with open(path, "rb") as f:
        return f.read().rstrip(b"\r\n")


def _describe(error: Exception, remote: Remote) -> str:
    """A RemoteError's own (redacted) message; anything else, by type, password removed."""
    from store.remote import RemoteError, plain

    if isinstance(error, RemoteError):
        return str(error)
    return remote.hide(plain(error))


def output_roles(k: Keyed) -> dict[str, str]:
    return {f"output{i}": path for i, path in enumerate(k.job.outputs)}


class Remote:
    """One configured remote, opened on first use; ``failed``: why, once it erred in this
    link."""

    __slots__ = ("_headers", "_secret", "backend", "failed", "reapi", "url")

    def __init__(self, url: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        from store.remote import REAPI_SCHEMES, redact, scheme

        self.url = redact(url)
        self.backend: Tier | None = None
        self.failed = ""
        self.reapi = scheme(url) in REAPI_SCHEMES
        # REAPI URLs carry no password (their keys are headers): no urllib.parse for them
        self._secret = "" if self.reapi else _password(url)
        self._headers = [value for _, value in headers if value] if self.reapi else []

    def hide(self, text: str) -> str:
        """``text`` without this remote's password or header values (for messages about
        unexpected errors)."""
        for secret in (self._secret, *self._headers):
            text = text.replace(secret, "***") if secret else text
        return text


def _password(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    from store.remote import password

    try:
        given = urlsplit(url).password
    except ValueError:
        return ""
    return password(unquote(given) if given else None) or ""


class Tiers:
    """The remotes of one link and what the link did with them (the ``remote_*`` counters)."""

    def __init__(
        self, options: Options, log: Log, store: Store,
        promote: Callable[[list[tuple[str, bytes]]], None], job_file: JobFile | None = None,
    ) -> None:  # fmt: skip
        #: Where verified remote hits go to reach the local store (link/writes.py).
        self.promote = promote
        executor = (options.remote_executor,) if options.remote_executor else ()
        self._urls = list(options.remote_storage or executor)  # REAPI: as Bazel does
        self.remotes = [Remote(url, options.remote_header) for url in self._urls]
        #: For REAPI remotes: what each key stands for (an Action), and where they run.
        self.job_file = job_file
        from .. import __version__

        self._reapi = {"instance_name": options.remote_instance_name,
                       "headers": options.remote_header, "tool_version": __version__}  # fmt: skip
        self._keyed: dict[str, Keyed] = {}
        self.read_only_remotes: set[int] = set()  # REAPI servers that refuse AC updates
        self.read_only = options.remote_read_only
        self.connect_timeout = options.remote_connect_timeout
        self.timeout = options.remote_timeout
        self.expiry = options.remote_expiry
        self.level = options.compression_level
        self.signing_key: bytes | None = None
        if options.remote_signing_key:
            self.signing_key = read_signing_key(options.remote_signing_key)
        self._warned_rejected = False
        self.log = log
        self.store = store
        self.token = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(8).hex()}"
        self.counters = dict.fromkeys(
            ("remote_hits", "remote_misses", "remote_errors", "remote_corrupt",
             "remote_wrong_key", "remote_uploads", "remote_bytes_downloaded",
             "remote_bytes_uploaded", "remote_round_trips", "remote_memo_hits",
             "remote_memo_uploads", "remote_rejected"), 0,
        )  # fmt: skip
        #: Hits of each remote, in --remote-storage order (the stats log's remote_tier_hits).
        self.tier_hits = [0] * len(self.remotes)
        if any(remote.reapi for remote in self.remotes):
            self.counters.update(dict.fromkeys(REAPI_COUNTERS, 0))
        self._held: dict[str, int] = {}  # key -> index of the remote holding our claim on it
        #: Keys whose remote value this link could not use (damaged, another key's, another
        #: format's): claimed regardless.
        self.contested: set[str] = set()
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        #: (key, upload it? or the value itself); None: the link ended.
        self._queue: list[tuple[str, bool | bytes] | None] = []
        self._wake = threading.Condition(self._lock)
        self._uploader: threading.Thread | None = None
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        for line in os.environ.pop(FAILED_ENV, "").splitlines():
            index, _, message = line.partition("\t")
            if index.isdigit() and int(index) < len(self.remotes) and message:
                self._fail(self.remotes[int(index)], message)

    # -- remotes --------------------------------------------------------------------------

    def _backend(self, i: int) -> Tier | None:
        remote = self.remotes[i]
        if remote.failed:
            return None
        with self._opening:  # the link and the uploader share one backend per remote
            if remote.backend is None:
                from store.remote import open_remote

                try:
                    remote.backend = open_remote(
                        self._urls[i], connect_timeout=self.connect_timeout, timeout=self.timeout,
                        **(self._reapi if remote.reapi else {"expiry": self.expiry}),
                    )  # fmt: skip
                except Exception as e:  # a remote problem never fails the link
                    self._fail(remote, _describe(e, remote))
                    return None
                if hasattr(remote.backend, "on_error"):  # a sharded tier: its servers apart
                    remote.backend.on_error = self._shard_failed
            return remote.backend

    def _fail(self, remote: Remote, message: str) -> None:
        with self._lock:
            if remote.failed:
                return
            remote.failed = message or "failed"
            self.counters["remote_errors"] += 1
        self.log.warn(f"remote {remote.url}: {message}; continuing without it")

    def _shard_failed(self, url: str, message: str) -> None:
        with self._lock:
            self.counters["remote_errors"] += 1
        self.log.warn(f"remote {url}: {message}; continuing without it (its keys are misses)")

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
        self,
        misses: list[Keyed],
        on_hit: Callable[[Keyed, int, dict[str, Any]], None],
        *,
        first: bool,
        gate: Callable[[bool], None] | None = None,
    ) -> list[Keyed]:
        """Serves what the remotes hold (one batch per remote); returns what is still missing.

        Each value is decoded (every byte re-hashed, the key it names compared with the one
        asked for) before any output is written, and the hits are promoted into the local
        store in one batch. ``on_hit(k, bytes, the entry's metadata)`` accounts each hit;
        ``first`` counts the rest as remote misses (later polls, for keys another machine
        compiles, do not). ``gate(every miss found)`` is called once every remote has
        answered, before anything is written: a warm server's child commits to the link there
        or hands it back (serve/handoff.py)."""
        from store import entry

        pending = [k for k in misses if k.key is not None]
        found: list[tuple[int, Keyed, bytes, dict[str, tuple[str, bytes]], dict[str, Any]]] = []
        have: set[int] = set()
        started = time.monotonic()
        for i, remote in enumerate(self.remotes):
            todo = [k for k in pending if k.job.index not in have]
            backend = self._backend(i) if todo else None
            if backend is None:
                continue
            try:
                if remote.reapi:
                    self._describe(backend, todo)
                values = backend.get_many([k.key for k in todo])  # type: ignore[misc]
            except Exception as e:  # a remote problem never fails the link
                self._fail(remote, _describe(e, remote))
                continue
            hits = len(found)
            for k, value in zip(todo, values, strict=True):
                if value is None:
                    continue
                key: str = k.key  # type: ignore[assignment]
                self.counters["remote_bytes_downloaded"] += len(value)
                roles = output_roles(k)
                try:
                    outputs, meta = entry.decode(value, key, self.signing_key)
                    if set(outputs) != set(roles):
                        raise entry.Refused("damaged")
                except entry.Refused as refused:
                    self._refused(remote, key, refused.reason)
                    continue
                found.append((i, k, value, outputs, meta))
                have.add(k.job.index)
            if remote.reapi and first:
                self.counters["reapi_misses"] += len(todo) - (len(found) - hits)
        if gate is not None:
            gate(len(have) == len(misses))
        promote: list[tuple[str, bytes]] = []
        served: set[int] = set()
        for i, k, value, outputs, meta in found:
            key = k.key  # type: ignore[assignment]
            if not self._write_outputs(output_roles(k), outputs):
                self.contested.add(key)
                continue
            promote.append((key, value))
            served.add(k.job.index)
            self.counters["remote_hits"] += 1
            self.tier_hits[i] += 1
            remote = self.remotes[i]
            if remote.reapi:
                self.counters["reapi_hits"] += 1
                self.counters["reapi_bytes_downloaded"] += len(value)
            if self.log.verbose:
                took = 1000 * (time.monotonic() - started)
                self.log.detail(f"hit  {key} {k.job.module}: remote ({remote.url}), "
                                f"{took:.1f} ms")  # fmt: skip
            on_hit(k, sum(len(data) for _, data in outputs.values()), meta)
        if promote:
            self.promote(promote)  # the next link hits locally
        if first:
            self.counters["remote_misses"] += len(pending) - len(served)
        return [k for k in misses if k.job.index not in served]

    def failures(self) -> str:
        """The remotes that failed in this link, a line each (index, tab, message): what a
        warm server's child hands back with a link it cannot serve, so that the client's own
        run does not wait for them again (``FAILED_ENV``)."""
        return "\n".join(f"{i}\t{' '.join(remote.failed.split())[:500]}"
                         for i, remote in enumerate(self.remotes) if remote.failed)  # fmt: skip

    def _refused(self, remote: Remote, key: str, reason: str) -> None:
        """Accounts a value the link cannot use (a miss): counted by why, and its key
        claimed regardless of it (the value is replaced once this link uploads its own)."""
        self.contested.add(key)
        if reason == "rejected":
            self._rejected(remote)
            what = "a value not signed with --remote-signing-key"
        elif reason == "key":
            self.counters["remote_wrong_key"] += 1
            what = "the value of another key"
        elif reason == "format":
            what = "a value of another format"
        else:
            self.counters["remote_corrupt"] += 1
            what = "a damaged value"
        self.log.detail(f"remote {remote.url}: {what} under {key}; a miss")

    def _describe(self, backend: Tier, ks: Sequence[Keyed]) -> None:
        """Tells a REAPI backend the Action each key stands for: the command line after the
        compiler with the job's own files by role (as in the key), outputs and toolchain."""
        from ..keys.key import role

        reapi: Any = backend
        job_file = self.job_file
        assert job_file is not None
        for k in ks:
            if k.key is None:
                continue
            self._keyed[k.key] = k
            arguments = []
            for arg in job_file.command(k.job)[1:]:
                flag, eq, value = arg.partition("=")
                if (named := role(job_file, k.job, arg)) is not None:
                    arguments.append(named)
                elif eq and (named := role(job_file, k.job, value)) is not None:
                    arguments.append(f"{flag}={named}")
                else:
                    arguments.append(arg)
            reapi.describe(k.key, arguments, len(k.job.outputs), k.toolchain)

    def _rejected(self, remote: Remote) -> None:
        """Counts a value the signing key does not verify; warns once a link."""
        self.counters["remote_rejected"] += 1
        if not self._warned_rejected:
            self._warned_rejected = True
            self.log.warn(f"remote {remote.url}: values not signed with --remote-signing-key; "
                          "not used (counted as remote_rejected)")  # fmt: skip

    @staticmethod
    def _write_outputs(roles: dict[str, str], outputs: dict[str, tuple[str, bytes]]) -> bool:
        """Each output written whole to a temporary file and renamed into place."""
        for role, dest in roles.items():
            tmp = f"{dest}.cached-dist-{os.getpid()}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(outputs[role][1])
                os.replace(tmp, dest)
            except OSError:
                try:  # noqa: SIM105 - contextlib imports collections and functools
                    os.unlink(tmp)
                except OSError:
                    pass
                return False  # compile it instead: the runner reports a real problem
        return True

    # -- the shared memo -------------------------------------------------------------------

    def memo_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]:
        """What the remotes remember for these memo keys (one batch per remote asked): the
        canonical digests of summary shards, so that a machine whose local store is empty
        need not decode shards another machine already decoded."""
        found: dict[str, str] = {}
        for i, remote in enumerate(self.remotes):
            todo = [k for k in keys if k not in found]
            backend = self._backend(i) if todo else None
            if backend is None:
                continue
            try:
                values = backend.get_many([_memo_key(namespace, k) for k in todo])
            except Exception as e:  # a remote problem never fails the link
                self._fail(remote, _describe(e, remote))
                continue
            for key, value in zip(todo, values, strict=True):
                text = _memo_text(value, _memo_key(namespace, key), self.signing_key)
                if text is True:
                    self._rejected(remote)
                elif text:
                    found[key] = str(text)
        self.counters["remote_memo_hits"] += len(found)
        return found

    def memo_share(self, namespace: str, items: Sequence[tuple[str, str]]) -> None:
        """Uploads memo entries learned here (in the background, like results)."""
        if not self.read_only:
            for key, text in items:
                memo_key = _memo_key(namespace, key)
                self._enqueue(memo_key, upload=_memo_value(memo_key, text, self.signing_key))

    # -- claims ---------------------------------------------------------------------------

    def claim(self, ks: list[Keyed]) -> set[int]:
        """Claims ``ks`` (claimed locally already) on the claims remote, in one batch; returns
        the job indices another machine holds (or whose value just appeared): theirs."""
        i = self._claims_remote()
        wanted = [k for k in ks if k.key is not None]
        backend = self._backend(i) if i is not None and wanted else None
        if backend is None or i is None or not backend.claims:
            return set()
        claiming: ClaimingTier = backend  # type: ignore[assignment]
        keys: list[str] = [k.key for k in wanted]  # type: ignore[misc]
        try:
            granted = claiming.claim_many(keys, self.token, LEASE_MS, self.contested)
        except Exception as e:  # a remote problem never fails the link
            self._fail(self.remotes[i], _describe(e, self.remotes[i]))
            return set()
        theirs = set()
        with self._lock:
            for k, key, ok in zip(wanted, keys, granted, strict=True):
                if ok:
                    self._held[key] = i
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
        while not self._stop.wait(_RENEW_EVERY):
            with self._lock:
                by_remote: dict[int, list[str]] = {}
                for key, i in self._held.items():
                    by_remote.setdefault(i, []).append(key)
            for i, keys in by_remote.items():
                backend: ClaimingTier | None = self.remotes[i].backend  # type: ignore[assignment]
                if backend is None or self.remotes[i].failed:
                    continue
                try:
                    backend.renew(keys, self.token, LEASE_MS)
                except Exception as e:  # a remote problem never fails the link
                    self._fail(self.remotes[i], _describe(e, self.remotes[i]))

    # -- uploads --------------------------------------------------------------------------

    def stored(self, k: Keyed) -> None:
        """The job was compiled here and stored locally: upload it (unless read-only), and
        drop its claim in the same trip."""
        if k.key is not None and not (self.read_only and k.key not in self._held):
            self._keyed[k.key] = k
            self._enqueue(k.key, upload=not self.read_only)

    def release(self, k: Keyed) -> None:
        """Gives up our remote claim on ``k`` (its job failed or was not stored)."""
        if k.key is not None and k.key in self._held:
            self._enqueue(k.key, upload=False)

    def _enqueue(self, key: str, *, upload: bool | bytes) -> None:
        with self._wake:
            self._queue.append((key, upload))
            self._wake.notify()
        if self._uploader is None:
            self._uploader = threading.Thread(target=self._upload, name="upload", daemon=True)
            self._uploader.start()

    def _upload(self) -> None:
        """Takes whatever is queued, as one batch per remote, until the link ends."""
        done = False
        while not done:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                if None not in self._queue:
                    self._wake.wait(_GATHER)  # let results finishing together share a trip
                batch, self._queue = self._queue, []
            done = None in batch
            items = [item for item in batch if item is not None]
            try:
                self._upload_batch(items)
            except Exception as e:  # a bug here must not hang or fail the link
                for remote in self.remotes:
                    self._fail(remote, f"upload failed ({_describe(e, remote)})")

    def _upload_batch(self, items: list[tuple[str, bool | bytes]]) -> None:
        """Exports the entries from the local store (re-hashed) and puts them on every remote
        that may be written, releasing our claims on the way; then the claims left over."""
        wanted = [key for key, upload in items if upload is True]
        exported = self.store.get_many(wanted, level=self.level, signing_key=self.signing_key)
        values = dict(zip(wanted, exported, strict=True)) if wanted else {}
        values.update((key, what) for key, what in items if isinstance(what, bytes))
        with self._lock:
            held = {key: self._held.pop(key) for key, _ in items if key in self._held}
        for i, remote in enumerate(self.remotes):
            puts = [(key, value) for key, value in values.items() if value is not None]
            if self.read_only or i in self.read_only_remotes:
                puts = []
            releases = [key for key, holder in held.items() if holder == i]
            if not (puts or releases) or remote.failed:
                continue
            backend = self._backend(i)
            if backend is None:
                continue
            try:
                if puts and remote.reapi:
                    self._put_reapi(i, backend, puts)
                    puts = []
                if puts:  # releasing a claim that is not ours is a no-op: the token differs
                    backend.put_many(puts, self.token if releases else None)
                    results = sum(1 for key, _ in puts if not key.startswith("memo-"))
                    self.counters["remote_uploads"] += results
                    self.counters["remote_memo_uploads"] += len(puts) - results
                    self.counters["remote_bytes_uploaded"] += sum(len(v) for _, v in puts)
                put_keys = {key for key, _ in puts}
                rest = [key for key in releases if key not in put_keys]
                if rest:
                    claiming: ClaimingTier = backend  # type: ignore[assignment]
                    claiming.release(rest, self.token)
            except Exception as e:  # a remote problem never fails the link
                self._fail(remote, _describe(e, remote))

    def _put_reapi(self, i: int, backend: Tier, puts: list[tuple[str, bytes]]) -> None:
        """Uploads results to a REAPI remote as Actions; one that refuses updates is said
        once and written no more."""
        reapi: Any = backend
        results = [(key, value) for key, value in puts if key in self._keyed]  # memos: not
        if not results:
            return
        self._describe(backend, [self._keyed[key] for key, _ in results])
        before = reapi.bytes_uploaded
        reapi.put_many(results)
        self.counters["reapi_bytes_uploaded"] += reapi.bytes_uploaded - before
        if reapi.notice:
            self.log.warn(f"remote {self.remotes[i].url}: {reapi.notice}")
            reapi.notice = ""
            self.read_only_remotes.add(i)
        else:
            self.counters["remote_uploads"] += len(results)
            self.counters["reapi_uploads"] += len(results)
            self.counters["remote_bytes_uploaded"] += reapi.bytes_uploaded - before
            if self.log.verbose:
                for key, _ in results:
                    self.log.detail(f"remote {self.remotes[i].url}: stored {key} as Action "
                                    f"{reapi.action_digest(key)}")  # fmt: skip

    # -- the end of the link --------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Waits (bounded) for uploads, releases what is still claimed; the link's counters."""
        with self._lock:
            leftover = list(self._held)
        for key in leftover:
            self._enqueue(key, upload=False)
        if self._uploader is not None:
            with self._wake:
                self._queue.append(None)
                self._wake.notify()
            self._uploader.join(UPLOAD_BOUND)
            if self._uploader.is_alive():
                for remote in self.remotes:
                    self._fail(remote, f"uploads still running after {UPLOAD_BOUND:.0f} s")
        self._stop.set()
        for remote in self.remotes:
            if remote.backend is not None:
                self.counters["remote_round_trips"] += remote.backend.round_trips
                if remote.reapi:
                    reapi: Any = remote.backend
                    self.counters["reapi_wrong_key"] += reapi.wrong_key
                    self.counters["reapi_corrupt"] += reapi.corrupt
                trips = remote.backend.round_trips
                self.log.detail(f"remote {remote.url}: {trips} round trip{'s' * (trips != 1)}")
                try:  # noqa: SIM105 - as above
                    remote.backend.close()
                except Exception:
                    pass
        return self.counters
