import pytest

from conftest import ROOT
from hdppo.envs.check import check_target
from hdppo.platform.errors import EnvError


def test_check_env_passes_builtin_and_config():
    assert "OK" in check_target("CartPole-v1", steps=50)
    assert "Pendulum-v1" in check_target("Pendulum-v1", steps=50)
    assert "OK" in check_target(str(ROOT / "configs" / "default.yaml"), steps=20)


def test_check_env_names_what_is_broken():
    with pytest.raises(EnvError, match="does not match the observation_space"):
        check_target("scripted_envs:countdown_wrong_shape", steps=10)
    with pytest.raises(EnvError, match="non-finite"):
        check_target("scripted_envs:countdown_nan", steps=10)
