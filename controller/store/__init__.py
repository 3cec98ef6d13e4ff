"""Loom's revisioned store (see :mod:`controller.store.db`, :mod:`controller.store.repo`)."""
