"""A headless Chromium driven over the DevTools protocol, for tests of the node's status page.

Debian's ``chromium`` package is enough: no browser download, no driver. The browser is started with
every background service off (no update checks, sync, metrics or translation), so it only talks to the
loopback pages a test opens. One page (target) per :class:`Browser`; :meth:`Browser.evaluate` runs a
JavaScript expression in it and returns its JSON value (promises awaited).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import re
import shutil
import tempfile
from types import TracebackType
from typing import Any

import aiohttp

FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only", "--mute-audio",
    "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
    # Names resolve to nothing but loopback: the page under test is all the browser may reach.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
_LISTENING = re.compile(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/")


def find_chromium() -> str | None:
    """Path of an installed Chromium, or None."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """``async with Browser(path) as b: await b.open(url); await b.evaluate("document.title")``."""

    def __init__(self, executable: str) -> None:
        self._exe = executable
        self._ids = itertools.count(1)
        self._profile = tempfile.TemporaryDirectory(prefix="polecat-chromium-")
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> Browser:
        self._proc = await asyncio.create_subprocess_exec(
            self._exe, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        assert self._proc.stderr is not None
        port = None
        async with asyncio.timeout(60):
            while port is None:
                line = await self._proc.stderr.readline()
                if not line:
                    raise RuntimeError("chromium exited before DevTools was listening")
                m = _LISTENING.search(line)
                port = int(m.group(1)) if m else None
        self._session = aiohttp.ClientSession(f"http://127.0.0.1:{port}")
        async with self._session.get("/json/list") as resp:
            pages = [t for t in await resp.json() if t["type"] == "page"]
        self._ws = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
        self._profile.cleanup()

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        msg_id = next(self._ids)
        await self._ws.send_json({"id": msg_id, "method": method, "params": params})
        async with asyncio.timeout(30):
            while True:
                msg = await self._ws.receive_json()
                if msg.get("id") == msg_id:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    result: dict[str, Any] = msg["result"]
                    return result

    async def open(self, url: str) -> None:
        await self._call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (a promise is awaited)."""
        result = await self._call("Runtime.evaluate", expression=expression, returnByValue=True,
                                  awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self) -> bytes:
        """A PNG of the page as shown."""
        result = await self._call("Page.captureScreenshot", format="png")
        return base64.b64decode(result["data"])

    async def wait_for(self, expression: str, within: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        async with asyncio.timeout(within):
            while True:
                with contextlib.suppress(RuntimeError):  # the page may be navigating
                    value = await self.evaluate(expression)
                    if value:
                        return value
                await asyncio.sleep(0.1)
