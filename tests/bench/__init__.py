"""Loom's benchmarks (``make bench``; not part of the tests).

Each section is a module ``tests.bench.<name>`` with ``run(args)`` returning a
rich ``Table`` (or a list of them, or a list of rows); ``python -m tests.bench``
runs the sections that exist and prints their tables.
"""
