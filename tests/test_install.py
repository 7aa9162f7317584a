"""hdppo installs anywhere: a wheel built from the repository holds every subpackage and the
presets, and, installed into a fresh venv, its ``hdppo`` lists the presets, checks a built-in env
and trains the quickstart by name from an empty folder, importing nothing from the repository.

Every other test runs on the editable install, which maps the packages to the repository's folders
and so cannot see what a wheel leaves out (issue 10: ``No module named 'hdppo.envs.builtin'``)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

# Repository folder -> import name (pyproject.toml's [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"platform": "hdppo/platform", "envs": "hdppo/envs", "policies": "hdppo/policies",
                "hierarchies": "hdppo/hierarchies"}
PRESETS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


def _sources(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _run(cmd: list, timeout: int, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


# ---------------------------------------------------------------- presets, on the editable install

def test_every_config_is_a_preset_with_a_one_line_description():
    from hdppo.platform.presets import preset_descriptions, preset_paths

    assert list(preset_paths()) == PRESETS
    for name, text in preset_descriptions().items():
        assert text and "\n" not in text and len(text) <= 110, f"configs/{name}.yaml: description {text!r}"


def test_a_preset_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    from hdppo.platform.config import load_config

    monkeypatch.chdir(tmp_path)
    assert load_config("default").name == "default"
    assert load_config("cartpole.yaml", ["train.seed=7"]).train.seed == 7
    (tmp_path / "default").write_text("name: mine\nenv: {id: CartPole-v1}\n")
    assert load_config("default").name == "mine"  # an existing file wins over the preset of that name


@pytest.mark.parametrize("arg,says", [
    ("nosuchpreset", "no preset is named 'nosuchpreset'"),
    ("nosuch/default.yaml", "config file nosuch/default.yaml does not exist."),  # a path: no preset looked up
])
def test_an_unknown_config_lists_the_presets_and_exits_2(tmp_path, monkeypatch, capsys, arg, says):
    from hdppo.platform.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() puts the working folder on sys.path
    assert main(["train", arg]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert says in err and "Pass the path to a YAML file" in err
    assert all(name in err for name in PRESETS) and "`hdppo presets`" in err
    assert not (tmp_path / "runs").exists()


def test_presets_command_prints_one_line_each(capsys):
    from hdppo.platform.cli import main

    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == PRESETS
    assert "hdppo train NAME" in lines[-1]


# ---------------------------------------------------------------- the wheel

@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built offline, as ``pip wheel .`` builds it, from a copy of the sources: setuptools
    builds in the source tree (build/), where files left by an earlier build would go into the
    wheel, and concurrent builds would meet."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed: the wheel is built offline, without build isolation "
                    "(pip install -e '.[test]' installs it)")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in [*PACKAGE_DIRS, "configs"]:
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "--no-build-isolation", "--no-index",
          "--quiet", "-w", tmp / "dist"], timeout=300, cwd=tmp)
    (built,) = (tmp / "dist").glob("hdppo-*.whl")
    return built


def test_wheel_holds_every_subpackage_module_and_preset(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"hdppo/configs/{name}.yaml" for name in PRESETS}
    for folder, package in PACKAGE_DIRS.items():
        sources = _sources(folder)
        # every package (an __init__.py) and every module, so a namespace folder such as
        # platform/ or a subfolder missing from pyproject's package list is caught as well
        assert any(p.name == "__init__.py" for p in sources) or folder == "platform"
        expected |= {f"{package}/{p.relative_to(ROOT / folder).as_posix()}" for p in sources}
    # Package data: the SMT2020 files the fab env reads (pyproject's [tool.setuptools.package-data]).
    fab_data = ROOT / "envs" / "builtin" / "fab" / "data"
    expected |= {f"hdppo/envs/builtin/fab/data/{p.relative_to(fab_data).as_posix()}"
                 for p in fab_data.rglob("*") if p.is_file()}
    assert not expected - names, f"missing from {wheel.name}: {sorted(expected - names)}"
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "hdppo = hdppo.platform.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# ---------------------------------------------------------------- installed into a fresh venv

@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A venv holding only the wheel; the dependencies (torch, ray, ...) are this environment's,
    reached by a ``.pth`` line. A plain path line adds the folder to ``sys.path`` without running
    the ``.pth`` files inside it, so the editable install's finder there stays off."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", root], timeout=120)
    python = root / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], timeout=60).stdout.strip())
    deps = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))  # ordered, no repeat
    (site / "hdppo_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    # pip --python installs for that interpreter (scripts with its shebang); --ignore-installed so
    # that it neither skips the wheel nor touches the editable hdppo it sees through the .pth.
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "--ignore-installed", "--quiet", wheel], timeout=300)
    return root


def _venv_env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return env | {"PYTHONNOUSERSITE": "1", "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}


def test_installed_hdppo_comes_from_the_wheel(venv, tmp_path):
    code = ("import json, hdppo, hdppo.platform.cli, hdppo.platform.trainer, hdppo.envs.builtin.corridor, "
            "hdppo.envs.builtin.rooms, hdppo.platform.sync_modes, hdppo.policies.bonuses, hdppo.hierarchies, sys\n"
            "from hdppo.platform.presets import preset_paths\n"
            "mods = {n: m.__file__ for n, m in sys.modules.items() if n.startswith('hdppo.') and getattr(m, '__file__', None)}\n"
            "print(json.dumps({'hdppo': list(hdppo.__path__), 'modules': mods, "
            "'presets': [str(p) for p in preset_paths().values()]}))")
    out = json.loads(_run([venv / "bin" / "python", "-c", code], timeout=180, cwd=tmp_path, env=_venv_env(venv)).stdout)
    files = [*out["hdppo"], *out["modules"].values(), *out["presets"]]
    assert out["modules"] and len(out["presets"]) == len(PRESETS)
    outside = [f for f in files if not Path(f).resolve().is_relative_to(venv.resolve())]
    assert not outside, f"imported from outside the installed wheel: {outside}"
    assert (venv / "bin" / "hdppo").read_text().startswith(f"#!{venv / 'bin' / 'python'}")


def test_installed_hdppo_lists_checks_and_trains_from_an_empty_folder(venv, tmp_path):
    hdppo, env = venv / "bin" / "hdppo", _venv_env(venv)
    presets = _run([hdppo, "presets"], timeout=120, cwd=tmp_path, env=env).stdout.splitlines()
    assert [line.split()[0] for line in presets[:-1]] == PRESETS
    assert str(venv) in presets[-1]  # copy one from the installed package, not the repository
    check = _run([hdppo, "check-env", "hdppo.envs.builtin.corridor:parallel_env", "--steps", "50"],
                 timeout=180, cwd=tmp_path, env=env)
    assert "rollout" in check.stdout
    # The quickstart on Ray, as `hdppo train default` runs it, for a few updates (the strategy
    # layer's batch alone is 2,048 env steps); Ray's workers import the env and policies from the
    # wheel too.
    _run([hdppo, "train", "default", "--set", "train.total_env_steps=4096", "--set", "train.eval_episodes=1"],
         timeout=600, cwd=tmp_path, env=env)
    run_dir = tmp_path / "runs" / "default"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 4096 and summary["updates"] >= 2
    assert list((run_dir / "checkpoints").glob("*.pt")) and (run_dir / "metrics.jsonl").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing else written in the folder
