"""Hierarchy spec and the one sampler that steps every layer (a flat run is one layer of one lane)."""
from .engine import Sampler, Track, run_episodes
from .spec import LayerSpec, build_spec, probe_env

__all__ = ["LayerSpec", "Sampler", "Track", "build_spec", "probe_env", "run_episodes"]
