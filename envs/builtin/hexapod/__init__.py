"""The hexapod env (being written)."""
