"""The README's library example is true: it runs as written against a local server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from polecat.testing.dns import LocalDnsServer
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

README = Path(__file__).resolve().parent.parent / "README.md"


def library_example() -> str:
    section = README.read_text().split("## Library API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2"])
def test_library_example_runs_as_written(test_web: TestWebFactory, tmp_path: Path, address: str) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=1))  # listening on 127.0.0.1 and 127.0.0.2
    html = {"Content-Type": "text/html"}
    web.respond(address, "/", 200, headers=html,
                body=b'<html><title>home</title><a href="/next">next</a> <a href="/gone">gone</a></html>')
    web.respond(address, "/next", 200, headers=html, body=b"<html><title>next</title>hello</html>")
    web.respond(address, "/gone", 404, headers=html, body=b"<html>gone</html>")
    script = tmp_path / "example.py"
    script.write_text(library_example())
    root = f"http://{address}:{web.port}/"
    run = subprocess.run([sys.executable, str(script), root], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert f"{root} text/html 2 links: home" in lines and f"{root}next text/html 0 links: next" in lines
    assert lines[-1].startswith("3 pages answered") and lines[-1].endswith("ended: queue empty")
    assert (tmp_path / "crawl-data" / "store").is_dir()


@pytest.mark.slow
def test_library_example_ends_on_a_dead_seed_with_the_verdict(dns_server: LocalDnsServer,
                                                             tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    # The example as written, with the test's resolver (never the machine's): the seed's name does not
    # exist there.
    resolver = f'"dns": {{"nameservers": ["{dns_server.address}"], '
    script.write_text(library_example().replace('"dns": {', resolver, 1))
    run = subprocess.run([sys.executable, str(script), "http://nowhere.test/"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("nothing could be fetched: nowhere.test: gave up after 3")
