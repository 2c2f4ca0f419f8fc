"""A small REAPI worker for the BuildGrid interoperability test: BuildGrid ships no worker.

    .venv/buildgrid/bin/python tests/buildgrid_bot.py URL PROPERTY=VALUE...

Runs in BuildGrid's own virtual environment (scripts/setup makes it), with BuildGrid's
generated Remote Workers API code. It opens a bot session advertising the properties given
(OSFamily, ISA, the toolchain identity the link machine's keys use), and for each lease:
reads the Action, its Command and input tree from the CAS, writes the tree to a fresh
directory, runs the command there (no sandbox: the compiler is the host's), uploads the
outputs, stdout and stderr, and completes the lease with the ActionResult. Stops on SIGTERM.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import (
    bots_pb2,
    bots_pb2_grpc,
    worker_pb2,
)

running = True


def stop(signum: int, frame: Any) -> None:
    global running
    running = False


def digest(data: bytes) -> Any:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def read(cas: Any, digests: list[Any]) -> dict[str, bytes]:
    if not digests:
        return {}
    answer = cas.BatchReadBlobs(re.BatchReadBlobsRequest(digests=digests), timeout=60)
    found = {r.digest.hash: r.data for r in answer.responses if r.status.code == 0}
    for d in digests:
        if d.hash not in found and d.size_bytes == 0:
            found[d.hash] = b""
    return found


def stage(cas: Any, root: Any, where: str) -> None:
    """The Directory ``root`` and everything below it, written under ``where``."""
    directory = re.Directory.FromString(read(cas, [root])[root.hash])
    os.makedirs(where, exist_ok=True)
    contents = read(cas, [f.digest for f in directory.files])
    for f in directory.files:
        path = os.path.join(where, f.name)
        with open(path, "wb") as out:
            out.write(contents[f.digest.hash])
        if f.is_executable:
            os.chmod(path, 0o755)
    for d in directory.directories:
        stage(cas, d.digest, os.path.join(where, d.name))


def execute(cas: Any, action_digest: Any) -> Any:
    """Runs the Action; its ActionResult (outputs uploaded)."""
    action = re.Action.FromString(read(cas, [action_digest])[action_digest.hash])
    command = re.Command.FromString(read(cas, [action.command_digest])[action.command_digest.hash])
    root = tempfile.mkdtemp(prefix="buildgrid-bot-")
    try:
        stage(cas, action.input_root_digest, root)
        cwd = os.path.join(root, command.working_directory)
        os.makedirs(cwd, exist_ok=True)
        outputs = list(command.output_paths) or list(command.output_files)
        for path in outputs:
            os.makedirs(os.path.dirname(os.path.join(cwd, path)) or cwd, exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        done = subprocess.run(list(command.arguments), cwd=cwd, env=env or None,
                              capture_output=True, check=False)  # fmt: skip
        result = re.ActionResult(exit_code=done.returncode)
        blobs = {}
        for data, field in ((done.stdout, "stdout_digest"), (done.stderr, "stderr_digest")):
            d = digest(data)
            getattr(result, field).CopyFrom(d)
            blobs[d.hash] = (d, data)
        if done.returncode == 0:
            for path in outputs:
                with open(os.path.join(cwd, path), "rb") as f:
                    data = f.read()
                d = digest(data)
                result.output_files.append(re.OutputFile(path=path, digest=d))
                blobs[d.hash] = (d, data)
        requests = [re.BatchUpdateBlobsRequest.Request(digest=d, data=data)
                    for d, data in blobs.values()]  # fmt: skip
        cas.BatchUpdateBlobs(re.BatchUpdateBlobsRequest(requests=requests), timeout=60)
        result.execution_metadata.worker = "buildgrid-test-bot"
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, stop)
    url, properties = argv[0], [p.partition("=") for p in argv[1:]]
    channel = grpc.insecure_channel(url.removeprefix("grpc://"))
    bots = bots_pb2_grpc.BotsStub(channel)
    cas = re_grpc.ContentAddressableStorageStub(channel)
    device = worker_pb2.Device(
        handle="buildgrid-test-bot",
        properties=[worker_pb2.Device.Property(key=k, value=v) for k, _, v in properties],
    )
    session = bots_pb2.BotSession(bot_id=f"buildgrid-test-bot-{os.getpid()}",
                                  status=bots_pb2.BotStatus.OK,
                                  worker=worker_pb2.Worker(devices=[device]))  # fmt: skip
    session = bots.CreateBotSession(
        bots_pb2.CreateBotSessionRequest(parent="", bot_session=session), timeout=60
    )
    print("bot session", session.name, flush=True)
    waiting = (bots_pb2.LeaseState.PENDING, bots_pb2.LeaseState.ACTIVE)  # BuildGrid: ACTIVE
    while running:
        for lease in session.leases:
            if lease.state not in waiting:
                continue
            print("lease", lease.id, flush=True)
            lease.state = bots_pb2.LeaseState.ACTIVE
            action_digest = re.Digest()
            action = re.Action()
            if lease.payload.Is(re.Action.DESCRIPTOR):
                lease.payload.Unpack(action)
                data = action.SerializeToString()
                action_digest = digest(data)
                cas.BatchUpdateBlobs(re.BatchUpdateBlobsRequest(
                    requests=[re.BatchUpdateBlobsRequest.Request(digest=action_digest, data=data)]
                ), timeout=60)  # fmt: skip
            else:
                lease.payload.Unpack(action_digest)
            try:
                result = execute(cas, action_digest)
                lease.result.Pack(result)
                lease.status.code = 0
            except Exception as e:  # a broken lease must not stop the bot
                print("lease failed:", type(e).__name__, e, flush=True)
                lease.status.code = 13  # INTERNAL
                lease.status.message = str(e)
            lease.state = bots_pb2.LeaseState.COMPLETED
        try:
            session = bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                timeout=30,  # the server long-polls for 80% of it
            )
        except grpc.RpcError as e:
            if not running:
                break
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                print("update failed:", e.code(), e.details(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
