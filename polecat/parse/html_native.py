"""The native extraction kernel (polecat/parse/_extract.c) bound to selectolax's lexbor, or nothing.

Rules:

1. The kernel binds at import to the lexbor that selectolax loaded (``selectolax.lexbor.__file__``); if a
   symbol is missing or the binding's probe fails, one warning is logged and polecat runs the Python path.
2. After binding, :meth:`Kernel.verify` runs both paths over :data:`SELF_TEST_PAGES` (documents chosen
   for the rules most likely to differ); one difference disables the kernel, with one warning.
3. A page the kernel cannot do (``ExtractError``: text that is not UTF-8, a failed parse) is done by the
   Python path; :attr:`Kernel.fallbacks` counts them and the first one is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import selectolax.lexbor

log = logging.getLogger("polecat")

SELF_TEST_PAGES = (
    "",
    "<!doctype html><html><head><title> A  title\n</title><title>second</title>"
    "<base href=' /b/ '><base href='/c/'><link rel='STYLESHEET Canonical' href=' /canon '>"
    "<link rel=canonical href=/later><meta name=' Robots ' content='NoIndex , x'>"
    "<meta name=other content=nofollow><script>var s = '<a href=/s>';</script>"
    "<noscript><a href=/ns>no</a> script</noscript></head><body>\n<p>Hello <b>world</b>&amp;&nbsp;"
    "</p><a href=' /x ' rel='a NOFOLLOW'>x</a><a HREF=/y REL=next>y</a><a href=/y>y</a><area href=/z>"
    "<a href='  javascript:x'>j</a><a href='\t\t\t\t\t\t\t\t\t\t\tmailto:x'>m</a><a href>v</a>"
    "<a href=''>e</a><template><a href=/t>t</a></template><style>p{}</style>\u00a0\u2003 ws \u3000"
    "<svg><title>svg <b>t</b></title><a xlink:href=/xl href=/sv>s</a><style>q</style>"
    "<![CDATA[cd]]></svg><math><mi>m</mi></math><!-- c --></body></html>",
    "<frameset><frame src=/f> </frameset><a href=/after>x</a>",
    "<title></title><title>  </title><svg><title> x </title></svg><p>\u00e9t\u00e9 \ud800 \x00 &#0;"
    "<a href='/\u00e9\ud800'>u</a><a href='\x00'>n</a><meta name=ROBOTS content=NOINDEX>",
    "<table><a href=/table>t</a><tr><td>c</td></tr>text</table><select><a href=/sel>s</a></select>",
    "<base href='http://[::bad'><base href=/good/><a href=x>x</a><link rel=canonical href=''>",
    "<meta name=polecat content=none><a href=/x>x</a><meta name=robots>",
)
"""Documents both paths must read alike: whitespace and strip rules, first base/canonical/title, meta
robots and the agent token, nofollow, skipped schemes, duplicates, invisible elements, <template>,
foreign content, framesets, surrogates, NUL and entities."""


class Kernel:
    """The native ``extract`` when it is bound and verified, else ``None`` (see the module's rules)."""

    def __init__(self, module: ModuleType | None) -> None:
        self.extract: Callable[[str | bytes], Any] | None = None
        self.error: type[Exception] = Exception
        self.fallbacks = 0
        if module is None:
            return
        try:
            module.bind(selectolax.lexbor.__file__)
        except module.ExtractError as e:
            log.warning("native HTML extraction unavailable (%s): using the Python path", e)
            return
        self.extract = module.extract
        self.error = module.ExtractError

    def verify(self, differs: Callable[[str], str | None]) -> None:
        """Disable the kernel if ``differs(page)`` (a description of how the two paths differ on it, or
        ``None``) finds a difference on one of :data:`SELF_TEST_PAGES`."""
        if self.extract is None:
            return
        for page in SELF_TEST_PAGES:
            difference = differs(page)
            if difference is not None:
                log.warning("native HTML extraction disabled: it differs from the Python path (%s)",
                            difference)
                self.extract = None
                return

    def fell_back(self, url: str, error: Exception) -> None:
        """Count (and log the first) page done by the Python path because the kernel could not."""
        self.fallbacks += 1
        if self.fallbacks == 1:
            log.warning("native HTML extraction could not do %s (%s): Python path used", url, error)
