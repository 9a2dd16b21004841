"""The native kernels (C extensions): the only thing here; metadata is in pyproject.toml.

Each kernel is optional: without a C compiler, or if one fails to build, ``pip install`` still succeeds
and polecat runs the kernel's pure-Python module instead (polecat/native.py chooses at import).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("polecat.dedup._minhash", ["polecat/dedup/_minhash.c"], optional=True),
        Extension("polecat.parse._extract", ["polecat/parse/_extract.c"], optional=True),
        Extension("polecat.dedup._canon", ["polecat/dedup/_canon.c"], optional=True),
        Extension("polecat.parse._guard", ["polecat/parse/_guard.c"], optional=True),
        Extension("polecat.store._warc", ["polecat/store/_warc.c"], optional=True),
        Extension("polecat.dedup._bloom", ["polecat/dedup/_bloom.c"], optional=True),
        Extension("polecat.cluster._claims", ["polecat/cluster/_claims.c"], optional=True),
        Extension("polecat.cluster._claimwire", ["polecat/cluster/_claimwire.c"], optional=True),
    ]
)
