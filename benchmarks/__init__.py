"""Benchmarks (not part of the test suite): ``python -m benchmarks.compare --size small`` compares polecat
with Scrapy and with a bare aiohttp loop on a generated loopback web; see benchmarks/README.md."""
