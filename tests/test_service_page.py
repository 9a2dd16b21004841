"""The status page in headless Chromium: it loads, the rate plot has data, a seed added through the
form gets queued (and fetched), and with a token it asks for one before showing anything."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from polecat.testing.browser import Browser, find_chromium
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.service_helpers import running_node, wait_for

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("POLECAT_REQUIRE_BROWSER"),
    reason="no chromium (apt-get install chromium; .ci/run installs it)")


def text(element_id: str) -> str:
    return f"document.getElementById({json.dumps(element_id)}).textContent"


async def test_page_plots_the_crawl_and_queues_a_seed_from_its_form(test_web: TestWebFactory,
                                                                    tmp_path: Path) -> None:
    assert CHROMIUM is not None, "POLECAT_REQUIRE_BROWSER is set but chromium is not installed"
    web = test_web(SiteSpec(hosts=2, pages_per_host=6))
    first, second = web.seeds[0], web.seeds[1]
    second_host = second.split("//")[1].split(":")[0]
    async with running_node(web, tmp_path, scope={"seeds": [first]}) as (svc, _), Browser(CHROMIUM) as page:
        await wait_for(lambda: svc.crawler.stats().fetches >= 3, what="a few fetches")
        await page.open(svc.url + "/")
        await page.wait_for(f"{text('summary')}.includes('fetched')")
        points = await page.wait_for("Number(document.getElementById('plot').dataset.points)")
        assert points >= 1
        top = await page.evaluate(f"{text('top-queues')} + '|' + {text('top-errors')}")
        assert isinstance(top, str)
        assert not any(r.host == second_host for r in web.log)
        await page.evaluate(f"document.getElementById('seed-urls').value = {json.dumps(second)}; "
                            "document.querySelector('#seed-form button').click()")
        result = await page.wait_for(text("seed-result"))
        assert result == f"{second}: queued"
        await wait_for(lambda: second in page_requests(web), what="the new seed fetched")
        # Four quarter-hour labels in an hour of minutes, the first one between 0 and 15 minutes in.
        axis = await page.evaluate("document.getElementById('plot').dataset.axis")
        assert len(axis.split()) == 4 and all(len(label) == 5 and label[2] == ":" for label in axis.split())


async def test_page_lists_blocks_and_pauses_and_resumes(test_web: TestWebFactory, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    web = test_web(SiteSpec(hosts=1, pages_per_host=3))
    async with running_node(web, tmp_path, scope={"block": ["spam.test", "*.ads.test"]}) as (svc, _), \
            Browser(CHROMIUM) as page:
        await page.open(svc.url + "/")
        await page.wait_for(f"{text('summary')}.includes('fetched')")
        assert await page.evaluate(text("blocks")) == "*.ads.testspam.test"
        assert await page.evaluate(text("pause")) == "Pause"
        await page.evaluate("document.getElementById('pause').click()")
        await page.wait_for(f"{text('pause')} === 'Resume'")
        assert svc.crawler.paused and await page.evaluate(text("state")) == "(paused)"
        await page.evaluate("document.getElementById('pause').click()")
        await page.wait_for(f"{text('pause')} === 'Pause'")
        assert not svc.crawler.paused


async def test_page_with_a_token(test_web: TestWebFactory, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    web = test_web(SiteSpec(hosts=1, pages_per_host=3))
    async with running_node(web, tmp_path, node={"token": "page-t0ken-of-the-test"}) as (svc, _), \
            Browser(CHROMIUM) as page:
        await page.open(svc.url + "/")
        assert "bearer token" in await page.wait_for(text("error"))
        assert await page.evaluate(text("summary")) == ""
        await page.evaluate("document.getElementById('token').value = 'page-t0ken-of-the-test'; "
                            "document.querySelector('#token-form button').click()")
        await page.wait_for(f"{text('summary')}.includes('fetched')")
        assert await page.evaluate(text("error")) == ""
