"""Networks, the PPO loss, GAE, schedules and normalizers: torch and numpy, no Ray."""
from hdppo.policies.gae import compute_gae
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler, RunningStats
from hdppo.policies.ppo_loss import clipped_policy_loss, clipped_value_loss, ppo_loss
from hdppo.policies.schedules import linear

__all__ = ["ActorCritic", "ObservationNormalizer", "RewardScaler", "RunningStats", "clipped_policy_loss",
           "clipped_value_loss", "compute_gae", "linear", "ppo_loss"]
