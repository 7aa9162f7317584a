"""The grasp env (being written)."""
