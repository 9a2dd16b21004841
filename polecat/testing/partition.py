"""A TCP proxy on loopback that can cut one process off from a server, as a network partition does.

``proxy = await Partition.start("127.0.0.1", etcd_port)`` listens on a free loopback port
(:attr:`Partition.endpoint`); a client given that address reaches the server through it. :meth:`cut`
closes every connection through it and holds each new one silent (accepted, nothing forwarded either
way: the client's calls time out, as across a partition, rather than being refused); :meth:`heal`
closes the held ones, and the client's next connection goes through again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class Partition:
    """The proxy of the module docstring, in the running event loop."""

    target: tuple[str, int]
    server: asyncio.Server | None = None
    cut_off: bool = False
    _open: set[asyncio.StreamWriter] = field(default_factory=set)
    _pumps: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    async def start(cls, host: str, port: int) -> Partition:
        """A proxy to ``host:port``, listening on ``host`` (a loopback address)."""
        proxy = cls((host, port))
        proxy.server = await asyncio.start_server(proxy._accept, host, 0)
        return proxy

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    def cut(self) -> None:
        """From now on nothing goes through: open connections are closed, new ones held silent."""
        self.cut_off = True
        self._close_all()

    def heal(self) -> None:
        """Forward again: the held connections are closed, so that the client opens new ones."""
        self.cut_off = False
        self._close_all()

    async def close(self) -> None:
        self._close_all()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    def _close_all(self) -> None:
        for writer in list(self._open):
            writer.close()
        self._open.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        if self.cut_off:  # held: the client waits for an answer that does not come
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._open.add(up_writer)
        for a, b in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(a, b, writer, up_writer))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    *ends: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while not self.cut_off and (data := await src.read(65536)):
                dst.write(data)
                await dst.drain()
        for end in ends:  # one side closed (or the cut): the other goes too
            end.close()
            self._open.discard(end)
