"""Environment loading, batching (every env as a VectorMultiAgentEnv) and validation."""
from .loading import make_gym_env, resolve_entry_point
from .vector import VecObs, VecStep, VectorMultiAgentEnv, make_vector_env

__all__ = ["VecObs", "VecStep", "VectorMultiAgentEnv", "make_gym_env", "make_vector_env", "resolve_entry_point"]
