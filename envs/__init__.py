"""Environment loading, batching and validation."""
from hdppo.envs.env_pool import EnvPool, StepResult
from hdppo.envs.loading import make_gym_env, resolve_entry_point

__all__ = ["EnvPool", "StepResult", "make_gym_env", "resolve_entry_point"]
