"""Example intent documents shipped with Loom (``dc1.yaml``: a small RFC 7938 Clos)."""
