"""A TCP proxy that adds a fixed delay to every round trip, for when ``tc netem`` is missing.

    python -m benchmarks.delay_proxy LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

Bytes from the client reach the server DELAY_MS later, in order; replies come straight back.
So each request/response exchange costs DELAY_MS more, as a link to a server DELAY_MS away
would, while a batch written at once (a pipeline) pays it once. Listens on 127.0.0.1.
"""

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


async def main(listen: int, host: str, port: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, 0.0),
                             return_exceptions=True)  # fmt: skip

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    listen, host, port, delay_ms = sys.argv[1:5]
    asyncio.run(main(int(listen), host, int(port), float(delay_ms) / 1000))
