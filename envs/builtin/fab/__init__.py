"""The fab env (being written)."""
