"""Hierarchy spec and runner (multi-layer hierarchies build on the single-layer engine)."""
__all__: list[str] = []
