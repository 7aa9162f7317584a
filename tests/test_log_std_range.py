"""policy.log_std_range: the learner keeps a Gaussian policy's log-std inside [min, max]."""
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.checkpoint import latest_checkpoint, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer


def _pendulum(policy: dict) -> dict:
    cfg = tiny_config(env={"id": "Pendulum-v1"}, train={"eval_episodes": 0})
    cfg["layers"][0]["policy"] = policy
    return cfg


def test_the_learner_projects_the_log_std_into_its_range(tmp_path):
    # Started above the maximum, every optimizer step ends with the log-std inside the range.
    cfg = _pendulum({"hidden": [16], "init_log_std": 0.5, "log_std_range": [-1.0, -0.2]})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    log_std = state["policy"]["log_std"]
    assert torch.all(log_std <= -0.2 + 1e-6) and torch.all(log_std >= -1.0 - 1e-6)


def test_without_a_range_the_log_std_is_free(tmp_path):
    cfg = _pendulum({"hidden": [16], "init_log_std": 0.5})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    assert torch.all(state["policy"]["log_std"] > -0.2)


@pytest.mark.parametrize("bad", [[-1.0], [0.0, -1.0], [-1.0, -1.0]])
def test_a_bad_range_names_the_field(bad):
    with pytest.raises(Exception, match="log_std_range"):
        validate(_pendulum({"log_std_range": bad}))
