"""The jobshop env (being written)."""
