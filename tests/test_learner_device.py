"""learner.device: resolved once in the driver (auto, cpu, cuda), a CUDA learner asks Ray for a GPU,
and everything trains on a machine without one."""
import pytest
import torch
import yaml

from conftest import tiny_config
from hdppo.platform import devices, group as group_module
from hdppo.platform.backend import LocalBackend
from hdppo.platform.checkpoint import latest_checkpoint, load_checkpoint
from hdppo.platform.cli import main
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.learner import Learner
from hdppo.platform.trainer import Trainer


def _with_device(device: str, **over) -> dict:
    cfg = tiny_config(**over)
    cfg["layers"][0]["learner"] = {"device": device}
    return cfg


def test_resolution(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0})
    assert devices.resolve_device("auto", "ray", "f") == "cuda"
    assert devices.resolve_device("cuda", "ray", "f") == "cuda"
    assert devices.resolve_device("cpu", "ray", "f") == "cpu"
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0})
    assert devices.resolve_device("auto", "ray", "f") == "cpu"
    with pytest.raises(ConfigError, match=r"layers\[0\] \(control\).learner.device is 'cuda', but the Ray cluster "
                                          r"reports no GPU.*Set it to 'auto'.*ray start --num-gpus"):
        devices.resolve_device("cuda", "ray", "layers[0] (control).learner.device")
    # In-process (ray.backend local): what torch sees here.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert devices.resolve_device("auto", "local", "f") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve_device("auto", "local", "f") == "cpu"
    with pytest.raises(ConfigError, match=r"torch.cuda.is_available\(\) is False"):
        devices.resolve_device("cuda", "local", "f")


def test_config_places_and_validates_the_device():
    cfg = validate(_with_device("auto"))
    assert cfg.learner_of("control").device == "auto" and validate(tiny_config()).learner_of("control").device == "cpu"
    grouped = validate(tiny_config(groups=[{"layers": ["control"], "learner": {"device": "cuda", "num_gpus": 0.5}}]))
    assert grouped.learner_of("control").num_gpus == 0.5
    with pytest.raises(ConfigError, match=r"layers\[0\].learner.device: Input should be 'auto', 'cpu' or 'cuda'"):
        validate(_with_device("gpu"))
    with pytest.raises(ConfigError, match=r"disagrees with groups\[0\].learner"):
        validate(_with_device("cpu", groups=[{"layers": ["control"], "learner": {"device": "cuda"}}]))


class _Recording(LocalBackend):
    """The local backend, remembering what each actor would have asked Ray for."""

    def __init__(self):
        self.asked: list[tuple[str, float | None]] = []

    def make(self, cls, *args, num_cpus=None, name=None, num_gpus=None):
        self.asked.append((cls.__name__, num_gpus))
        return super().make(cls, *args)


def test_a_cuda_learner_asks_for_a_gpu_and_workers_do_not(monkeypatch, tmp_path):
    """With a GPU reported, `auto` resolves to cuda: the learner is built for it and asks for
    learner.num_gpus; the workers ask for none. (The learner itself is then moved back to CPU:
    this machine has no GPU.)"""
    monkeypatch.setattr(devices, "gpus_available", lambda backend: 1.0)
    built: list[str] = []

    class CpuAnyway(Learner):
        def __init__(self, *args):
            built.append(args[9])
            super().__init__(*args[:9], "cpu")

    monkeypatch.setattr(group_module, "Learner", CpuAnyway)
    trainer = Trainer(validate(_with_device("auto", train={"eval_episodes": 0})), tmp_path / "run", quiet=True)
    backend = trainer.backend = _Recording()
    trainer.train()
    assert built == ["cuda"] and trainer.groups[0].devices == {"control": "cuda"}
    assert ("CpuAnyway", 1.0) in backend.asked
    assert {gpus for cls, gpus in backend.asked if cls == "RolloutWorker"} == {None}


def test_cpu_trains_and_checkpoints_hold_cpu_tensors(tmp_path):
    summary = Trainer(validate(_with_device("cpu", train={"eval_episodes": 0})), tmp_path / "run", quiet=True).train()
    assert summary["updates"] == 2
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    tensors = list(state["policy"].values()) + [v for s in state["optimizer"]["state"].values() for v in s.values()]
    assert all(t.device.type == "cpu" for t in tensors)


def test_auto_trains_on_ray_without_a_gpu_and_says_where(ray_session, tmp_path, capsys):
    cfg = _with_device("auto", ray={"backend": "ray"}, train={"eval_episodes": 0})
    trainer = Trainer(validate(cfg), tmp_path / "run")
    summary = trainer.train()
    assert summary["updates"] == 2 and summary["learner_devices"] == {"control": "cpu"}
    assert trainer.groups[0].devices == {"control": "cpu"}
    out = " ".join(capsys.readouterr().out.split())
    assert ("learner.device auto: layer 'control' on cpu (no GPU: the Ray cluster reports none, "
            "ray.cluster_resources())") in out


def test_cuda_without_a_gpu_is_exit_2_naming_the_field(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_with_device("cuda")))
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "layers[0] (control).learner.device is 'cuda', but torch in this process sees no CUDA device" in err
    assert "Set it to 'auto'" in err
