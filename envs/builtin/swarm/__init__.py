"""The swarm env (being written)."""
