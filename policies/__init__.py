"""Networks, the PPO loss, GAE, schedules and normalizers: torch and numpy, no Ray."""
from .gae import compute_gae
from .networks import ActorCritic
from .normalizers import ObservationNormalizer, RewardScaler, RunningStats
from .ppo_loss import clipped_policy_loss, clipped_value_loss, ppo_loss
from .schedules import linear

__all__ = ["ActorCritic", "ObservationNormalizer", "RewardScaler", "RunningStats", "clipped_policy_loss",
           "clipped_value_loss", "compute_gae", "linear", "ppo_loss"]
