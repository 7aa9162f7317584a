"""Bad env, reward and run-dir input through ``hdppo`` itself: one clear paragraph naming the
thing and the fix, a non-zero exit code, never a traceback."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from hdppo.platform.cli import main

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = str(ROOT / "configs" / "cartpole.yaml")
CORRIDOR = str(ROOT / "configs" / "corridor_hierarchy.yaml")
TINY = ["--set", "train.total_env_steps=512", "--set", "ray.backend=local", "--set", "train.eval_episodes=0"]
SMALL = ["--set", "layers.0.dppo.num_workers=1", "--set", "layers.0.dppo.num_envs_per_worker=2",
         "--set", "layers.0.dppo.train_batch_size=256", "--set", "layers.0.ppo.minibatch_size=64"]

# Module names of their own, so that no other test's module of that name is picked up.
BAD_IMPORT = "hdppo_t_badmod"
BAD_CALL = "hdppo_t_callraise"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working folder holding mods/ (a module that raises on import, one whose factory raises)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI puts the cwd and --working-dir on it
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / f"{BAD_IMPORT}.py").write_text('raise RuntimeError("boom at import")\n')
    (mods / f"{BAD_CALL}.py").write_text('def make(**kwargs):\n    raise ValueError("factory failed")\n')
    for name in (BAD_IMPORT, BAD_CALL):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in (BAD_IMPORT, BAD_CALL):
        sys.modules.pop(name, None)


def run(capsys, argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr (whitespace joined, as the CLI wraps its message) of ``hdppo argv``."""
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, " ".join(err.split())


def scratch_module(scratch: Path, name: str, source: str) -> str:
    """Write ``mods/<name>.py`` and forget any earlier import of that name; returns the name."""
    (scratch / "mods" / f"{name}.py").write_text(source)
    sys.modules.pop(name, None)
    return name


def test_env_module_that_raises_on_import(scratch, capsys, monkeypatch):
    code, err = run(capsys, ["train", CARTPOLE, *TINY, "--working-dir", "mods", "--set",
                             f"env.entry_point={BAD_IMPORT}:make", "--set", "env.id=null", "--run-dir", "r"])
    assert code != 0 and err.startswith("hdppo train: error:")
    for part in (f"'{BAD_IMPORT}:make'", f"module '{BAD_IMPORT}'", "RuntimeError: boom at import",
                 "Fix the module", f'python -c "import {BAD_IMPORT}"'):
        assert part in err
    assert not (scratch / "r").exists()
    monkeypatch.syspath_prepend(str(scratch / "mods"))  # as PYTHONPATH=mods
    code, err = run(capsys, ["check-env", f"{BAD_IMPORT}:make"])
    assert code != 0 and err.startswith("hdppo check-env: error:")
    assert f"'{BAD_IMPORT}:make'" in err and "RuntimeError: boom at import" in err and "Fix the module" in err


def test_env_factory_that_raises(scratch, capsys, monkeypatch):
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--set",
                             f"env.entry_point={BAD_CALL}:make", "--run-dir", "r"])
    assert code != 0
    for part in (f"env '{BAD_CALL}:make'", "ValueError: factory failed",
                 "make(num_agents=1, length=9, max_steps=24)", "Fix the factory, or env.kwargs"):
        assert part in err
    assert not (scratch / "r").exists()
    monkeypatch.syspath_prepend(str(scratch / "mods"))
    code, err = run(capsys, ["check-env", f"{BAD_CALL}:make"])
    assert code != 0 and f"env '{BAD_CALL}:make'" in err and "ValueError: factory failed" in err
    assert "make() (no env.kwargs)" in err


def test_reward_module_that_raises_on_import(scratch, capsys):
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--set",
                             f"layers.1.reward.intrinsic_fn={BAD_IMPORT}:make", "--run-dir", "r"])
    assert code != 0
    for part in ("layers[1] (control).reward.intrinsic_fn", f"module '{BAD_IMPORT}'",
                 "RuntimeError: boom at import", "Fix the module"):
        assert part in err
    assert not (scratch / "r").exists()


@pytest.mark.parametrize("argv", [["check-env", ":make"],
                                  ["train", CARTPOLE, *TINY, "--set", "env.entry_point=:make", "--set", "env.id=null",
                                   "--run-dir", "r"]])
def test_empty_module_name(scratch, capsys, argv):
    code, err = run(capsys, argv)
    assert code != 0
    assert "':make' has an empty module name" in err and "'package.module:function'" in err


def test_run_dir_that_is_a_file_or_cannot_be_created(scratch, capsys):
    (scratch / "afile").write_text("not a folder")
    for run_dir, says in (("afile", "run dir afile is a file, not a folder"),
                          ("afile/sub", "run dir afile/sub cannot be created"),
                          ("/proc/x", "run dir /proc/x cannot be created")):
        for resume in ([], ["--resume"]):
            code, err = run(capsys, ["train", CARTPOLE, *TINY, "--run-dir", run_dir, *resume])
            assert code != 0
            if not (resume and run_dir != "afile"):  # resuming a folder that is not there: "no checkpoint"
                assert says in err and "Pass --run-dir a folder that can be created" in err, err
            else:
                assert "has no checkpoint to resume from" in err
    assert (scratch / "afile").read_text() == "not a folder"


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_with_another_config_leaves_the_run_dir_as_it_was(scratch, capsys):
    assert main(["train", CARTPOLE, *TINY, *SMALL, "--run-dir", "R"]) == 0
    capsys.readouterr()
    before = _digests(scratch / "R")
    assert any(k.startswith("checkpoints/") for k in before)
    fix = "Resume it with the config it was trained with: hdppo train R/config.yaml --run-dir R --resume"

    code, err = run(capsys, ["train", CARTPOLE, *TINY, *SMALL, "--set", "layers.0.policy.hidden=[32]",
                             "--run-dir", "R", "--resume"])
    assert code != 0 and err.startswith("hdppo train: error: --resume: the checkpoint in R")
    assert "was trained with another config: layer 'control': its weights" in err
    assert "[64, 4] in the checkpoint, [32, 4] with this config" in err and fix in err
    assert _digests(scratch / "R") == before

    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--run-dir", "R", "--resume"])
    assert code != 0
    assert "it holds the layers 'control', this config has 'strategy', 'control'" in err and fix in err
    assert _digests(scratch / "R") == before


def test_a_failed_start_removes_the_folders_it_made_and_only_those(scratch, capsys):
    """--run-dir a/b/c, or the default runs/<name>, for an env that cannot be made: a, a/b and runs/
    are gone again; a folder that was there before stays, and so do its files."""
    bad = ["--set", "env.id=NoSuchEnv-v9"]
    code, err = run(capsys, ["train", CARTPOLE, *TINY, *bad, "--run-dir", "a/b/c"])
    assert code != 0 and "NoSuchEnv-v9" in err
    assert not (scratch / "a").exists()
    code, _ = run(capsys, ["train", CARTPOLE, *TINY, *bad])
    assert code != 0 and not (scratch / "runs").exists()
    (scratch / "keep").mkdir()
    (scratch / "keep" / "notes.txt").write_text("mine")
    code, _ = run(capsys, ["train", CARTPOLE, *TINY, *bad, "--run-dir", "keep/x/y"])
    assert code != 0 and sorted(p.name for p in (scratch / "keep").iterdir()) == ["notes.txt"]
    # An empty folder the user made and named as the run dir is theirs: emptied of what the run
    # wrote (its lock file), kept.
    (scratch / "mine").mkdir()
    code, _ = run(capsys, ["train", CARTPOLE, *TINY, *bad, "--run-dir", "mine"])
    assert code != 0 and (scratch / "mine").is_dir() and not any((scratch / "mine").iterdir())


def test_a_missing_config_or_a_folder_is_named_as_such(scratch, capsys):
    code, err = run(capsys, ["check-env", "nope.yaml"])
    assert code != 0 and "config file 'nope.yaml' does not exist" in err
    code, err = run(capsys, ["train", "mods"])
    assert code != 0 and "mods is a folder, not a config file" in err


def test_an_early_ctrl_c_says_what_happened(monkeypatch, capsys):
    import hdppo.platform.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt()   # as a Ctrl-C before the trainer installs its handlers

    monkeypatch.setattr(cli, "_cmd_presets", interrupted)
    assert main(["presets"]) == 130
    assert capsys.readouterr().err.strip() == "hdppo presets: interrupted (Ctrl-C) before anything was kept"


def test_check_env_on_a_factory_that_returns_no_env(capsys):
    code, err = run(capsys, ["check-env", "os:getcwd"])
    assert code != 0 and "the factory returned str, not an env" in err


def test_schedule_checkpoint_of_another_env_is_named_not_a_size_mismatch(scratch, capsys):
    """A layer started from another env's run of the same layer name (CartPole's control under the
    corridor's strategy): one paragraph saying so, not torch's state-dict traceback."""
    assert run(capsys, ["train", CARTPOLE, *TINY, *SMALL, "--run-dir", "cp"])[0] == 0
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--set", "layers.1.schedule.mode=frozen",
                             "--set", f"layers.1.schedule.checkpoint={scratch / 'cp'}", "--run-dir", "r"])
    assert code != 0 and "layer 'control', schedule.checkpoint:" in err
    assert "trained with another observation, action space or network" in err and "in the checkpoint" in err
    assert not (scratch / "r").exists()


def test_config_files_that_are_empty_or_not_text_and_other_small_mistakes(scratch, capsys):
    (scratch / "empty.yaml").write_text("\n  \n")
    code, err = run(capsys, ["train", "empty.yaml"])
    assert code != 0 and "empty.yaml is empty" in err
    (scratch / "bin.yaml").write_bytes(b"\xff\xfe\x00name")
    code, err = run(capsys, ["train", "bin.yaml"])
    assert code != 0 and "is not a text file in UTF-8" in err
    code, err = run(capsys, ["train", CARTPOLE, *TINY, "--set", "env.id=pettingzoo.butterfly.cooperative_pong_v6"])
    assert code != 0 and "is a Python module: for a PettingZoo env set env.type: pettingzoo" in err
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--set", "groups=[{layers: [strategy, strategy]}, {layers: [control]}]"])
    assert code != 0 and "layer 'strategy' is listed twice" in err
    assert not (scratch / "runs").exists()


def test_user_functions_with_the_wrong_parameters_are_named_before_training(scratch, capsys):
    """A reward, an observation view or a teacher that cannot take the arguments hdppo passes is a
    config error naming the field and the call expected (it was a worker crash mid-rollout, retried,
    then a traceback); one taking **kwargs passes."""
    scratch_module(scratch, "hdppo_t_sigs",
        "import numpy as np\n"
        "def bad_reward(x):\n    return 0.0\n"
        "def good_reward(command, obs, **_):\n    return 0.0\n"
        "def bad_view(x):\n    return np.zeros(2, np.float32)\n"
        "def bad_teacher(raw_obs):\n    return 0\n")
    base = ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--run-dir", "r"]
    code, err = run(capsys, [*base, "--set", "layers.control.reward.intrinsic_fn=hdppo_t_sigs:bad_reward"])
    assert code == 2 and ("layers[1] (control).reward.intrinsic_fn 'hdppo_t_sigs:bad_reward': bad_reward(x) cannot "
                          "be called as fn(command=, obs=, next_obs=, action=, info=)") in err, err
    code, err = run(capsys, [*base, "--set", "layers.strategy.observation.source=hdppo_t_sigs:bad_view"])
    assert code == 2 and ("layers[0] (strategy).observation.source 'hdppo_t_sigs:bad_view': bad_view(x) cannot be "
                          "called as fn(env_obs, members, env)") in err, err
    code, err = run(capsys, [*base, "--set", "layers.strategy.teacher={policy: 'hdppo_t_sigs:bad_teacher'}"])
    assert code == 2 and "layers[0] (strategy).teacher.policy 'hdppo_t_sigs:bad_teacher': bad_teacher(raw_obs)" in err
    assert not (scratch / "r").exists()
    code, err = run(capsys, [*base, "--set", "layers.control.reward.intrinsic_fn=hdppo_t_sigs:good_reward"])
    assert code == 0, err
    sys.modules.pop("hdppo_t_sigs", None)


def test_a_command_followed_only_by_a_zero_weighted_reward_is_refused(scratch, capsys):
    """intrinsic_fn with weight 0 is charted, not a reward: a layer that neither observes the
    command nor is paid for following it cannot take it (it was accepted, then crashed)."""
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--set", "layers.control.reward.intrinsic=0",
                             "--set", "layers.control.observation.command=false"])
    assert code == 2 and "the layer below (control) neither observes the command" in err
    assert "(the command line set --set" in err and "as changed on the command line, is invalid" in err


def test_eval_and_export_take_the_working_dir_a_run_was_trained_from(scratch, capsys):
    """A run trained from the folder of its env module, without --working-dir, is evaluated and
    exported from elsewhere with --working-dir naming that folder (the import error's advice)."""
    (scratch / "hdppo_t_wd_env.py").write_text("import gymnasium\ndef make(**kw):\n    return gymnasium.make('CartPole-v1')\n")
    sys.modules.pop("hdppo_t_wd_env", None)
    code, err = run(capsys, ["train", CARTPOLE, *TINY, *SMALL, "--set", "env={entry_point: 'hdppo_t_wd_env:make'}",
                             "--run-dir", "r"])
    assert code == 0, err
    (scratch / "elsewhere").mkdir()
    os.chdir(scratch / "elsewhere")
    sys.modules.pop("hdppo_t_wd_env", None)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != scratch.resolve()]
    code, err = run(capsys, ["eval", "../r", "--episodes", "1"])
    assert code == 2 and "hdppo_t_wd_env" in err and "--working-dir" in err
    code, err = run(capsys, ["eval", "../r", "--episodes", "1", "--working-dir", "nope"])
    assert code == 2 and "--working-dir nope: no such folder" in err
    code, err = run(capsys, ["eval", "../r", "--episodes", "1", "--working-dir", ".."])
    assert code == 0, err
    code, err = run(capsys, ["export", "../r", "--format", "torchscript", "--out", "m.pt", "--working-dir", ".."])
    assert code == 0 and (scratch / "elsewhere" / "m.pt").is_file(), err
    sys.modules.pop("hdppo_t_wd_env", None)


def test_user_functions_that_raise_while_training_stop_the_run_with_their_line(scratch, capsys):
    """A reward, an observation view or a teacher that raises mid-rollout is a bug in it, the same on
    every worker: one paragraph naming the field, the function, the exception and its line in the
    user's file, exit 2 (it was a worker replaced again and again, then a RuntimeError traceback)."""
    scratch_module(scratch, "hdppo_t_raise",
        "def view(raw_obs, members, env):\n"
        "    return raw_obs['nobody']\n"
        "def teacher(raw_obs, members, env):\n"
        "    raise ValueError('no rule for this state')\n"
        "def reward_none(command, obs, next_obs, action, info):\n"
        "    return None\n"
        "def reward_dict(command, obs, next_obs, action, info):\n"
        "    return float(info)\n"
        "def view_nan(raw_obs, members, env):\n"
        "    return [float('nan'), 0.0]\n")
    base = ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--run-dir", "r"]
    for field, value, words in (
            ("layers.control.reward.intrinsic_fn", "hdppo_t_raise:reward_dict",
             ["layers[1] (control).reward.intrinsic_fn 'hdppo_t_raise:reward_dict' raised TypeError",
              "hdppo_t_raise.py, line 8, in reward_dict", "It is called for one lane with keyword arguments"]),
            ("layers.strategy.observation.source", "hdppo_t_raise:view",
             ["layers[0] (strategy).observation.source 'hdppo_t_raise:view' raised KeyError: 'nobody'",
              "hdppo_t_raise.py, line 2, in view", "view(raw_obs, members, env)"]),
            ("layers.strategy.observation.source", "hdppo_t_raise:view_nan",   # it reached env.step as a NaN action
             ["'hdppo_t_raise:view_nan' raised ValueError: it returned a non-finite value", "(on the value it returned)"]),
            ("layers.control.reward.intrinsic_fn", "hdppo_t_raise:reward_none",
             ["'hdppo_t_raise:reward_none' raised TypeError", "(on the value it returned)"]),
            ("layers.strategy.teacher", "{policy: 'hdppo_t_raise:teacher'}",
             ["layers[0] (strategy).teacher.policy 'hdppo_t_raise:teacher' raised ValueError: no rule for this state",
              "hdppo_t_raise.py, line 4, in teacher"])):
        code, err = run(capsys, [*base, "--set", f"{field}={value}"])
        assert code == 2 and err.startswith("hdppo train: error:"), err
        for w in words + ["so the run stops", "Fix the function"]:
            assert w in err, (w, err)
        assert "replaced" not in err
    sys.modules.pop("hdppo_t_raise", None)


def test_a_view_that_changes_size_is_named_with_both_sizes(scratch, capsys):
    """A view whose size changes mid-run (a finished agent's part left out) was reported as the
    function raising ValueError ("could not broadcast"), its own error; it is a broken contract:
    the paragraph names the lane, both sizes and what to return instead."""
    scratch_module(scratch, "hdppo_t_grow",
        "def view(raw_obs, members, env):\n"
        "    calls = getattr(env, '_t_calls', 0)\n"
        "    env._t_calls = calls + 1\n"
        "    return [0.0] * (2 if calls == 0 else 3)\n")
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--run-dir", "r",
                             "--set", "layers.strategy.observation.source=hdppo_t_grow:view"])
    assert code == 2 and err.startswith("hdppo train: error:"), err
    for w in ("layers[0] (strategy).observation.source 'hdppo_t_grow:view' returned 3 numbers for lane",
              "but 2 on its first call", "finished ones included", "give a missing agent's part zeros"):
        assert w in err, (w, err)
    assert "raised" not in err and "broadcast" not in err
    sys.modules.pop("hdppo_t_grow", None)


@pytest.mark.parametrize("which", ["periodic", "final"])
def test_an_env_that_raises_in_the_evaluation_stops_with_one_paragraph(scratch, capsys, which):
    """The evaluation steps the env in the driver: an env raising there ended the run with a raw
    traceback (exit 1), the final evaluation without summary.json. Now one paragraph with the
    line, the stack in a file; a finished training keeps its summary and is evaluated later."""
    scratch_module(scratch, "hdppo_t_evalcrash",
        "import gymnasium as gym\n"
        "class OnEvalSeeds(gym.Wrapper):\n"
        "    def reset(self, seed=None, options=None):\n"
        "        self.evaluating = seed is not None and seed >= 400_000   # the evaluation's seeds\n"
        "        return self.env.reset(seed=seed, options=options)\n"
        "    def step(self, action):\n"
        "        if self.evaluating:\n"
        "            raise ValueError('no evaluation map')\n"
        "        return self.env.step(action)\n"
        "def make(**kwargs):\n    return OnEvalSeeds(gym.make('CartPole-v1'))\n")
    extra = (["--set", "train.eval_every=2", "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=1"]
             if which == "periodic"
             else ["--set", "train.eval_episodes=1"])
    code = main(["train", CARTPOLE, *TINY, *SMALL, *extra, "--working-dir", "mods", "--set",
                 "env.entry_point=hdppo_t_evalcrash:make", "--set", "env.id=null", "--run-dir", "r"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "Traceback" not in err, err
    label = "the periodic evaluation (train.eval_every)" if which == "periodic" else "the final evaluation"
    for w in (f"{label}: env 'hdppo_t_evalcrash:make' raised ValueError: no evaluation map",
              "hdppo_t_evalcrash.py, line 8, in step", "hdppo check-env"):
        assert w in err, (w, err)
    Path(err.split("The whole traceback: ")[1].split()[0]).unlink()
    if which == "final":
        summary = json.loads((scratch / "r" / "summary.json").read_text())
        assert summary["env_steps"] >= 512 and "ValueError" in summary["final_evaluation_error"]
        assert "evaluate it with: hdppo eval" in err and "--resume" not in err
    else:
        assert "continue it with:" in err and "--resume" in err


def test_an_env_that_fails_on_every_worker_stops_with_one_paragraph(scratch, capsys):
    """Every worker failing in the same iteration is an env bug, not a crashed simulator: an error
    naming the env and the last failure, exit 2, no traceback on the console: the worker's whole
    stack (it was lost: only its first line was shown) goes to a file the paragraph names."""
    scratch_module(scratch, "hdppo_t_broken",
        "import gymnasium as gym\n"
        "class Broken(gym.Wrapper):\n"
        "    def step(self, action):\n"
        "        raise ZeroDivisionError('the simulator divides by zero')\n"
        "def make(**kwargs):\n    return Broken(gym.make('CartPole-v1'))\n")
    code = main(["train", CARTPOLE, *TINY, *SMALL, "--working-dir", "mods", "--set",
                 "env.entry_point=hdppo_t_broken:make", "--set", "env.id=null", "--run-dir", "r"])
    out, err = (" ".join(text.split()) for text in capsys.readouterr())
    assert code == 2 and "every worker failed in the same iteration" in err and "Traceback" not in err, err
    # The replaced workers' lines named a log in the run dir, which the failed start then removed.
    assert "replaced" in out and "should the run stop before its first update, in the file its error names" in out, out
    for w in ("ZeroDivisionError: the simulator divides by zero", "'hdppo_t_broken:make'", "hdppo check-env"):
        assert w in err, (w, err)
    # The worker's whole stack (the line in the user's file with its code) is in the file the paragraph
    # names; the failed start left no run dir for the log it wrote.
    path = Path(err.split("The whole traceback: ")[1].split()[0])
    stack = path.read_text()
    path.unlink()
    assert "Traceback (most recent call last)" in stack and "hdppo_t_broken.py" in stack, stack
    assert "raise ZeroDivisionError" in stack, stack
    assert not (scratch / "r").exists()
    sys.modules.pop("hdppo_t_broken", None)


def test_a_factory_error_is_not_blamed_on_its_arguments_and_a_pettingzoo_factory_is_named(scratch, capsys):
    """A TypeError raised inside a factory's body is the factory's error (it was reported as env.kwargs
    rejected, with no kwargs set); a factory returning a PettingZoo env gets told env.type: pettingzoo."""
    scratch_module(scratch, "hdppo_t_fac",
        "def make_typeerr():\n    x = None\n    return x + 1\n"
        "def make_zoo():\n"
        "    from hdppo.envs.builtin.corridor import parallel_env\n"
        "    return parallel_env()\n")
    base = ["train", CARTPOLE, *TINY, "--working-dir", "mods", "--set", "env.id=null", "--run-dir", "r"]
    code, err = run(capsys, [*base, "--set", "env.entry_point=hdppo_t_fac:make_typeerr"])
    assert code == 2 and "the factory raised TypeError: unsupported operand" in err and "(no env.kwargs)" in err, err
    assert "rejected its arguments" not in err
    code, err = run(capsys, [*base, "--set", "env.entry_point=hdppo_t_fac:make_typeerr", "--set", "env.kwargs={size: 3}"])
    assert code == 2 and "rejected its arguments" in err and "Check env.kwargs" in err, err
    code, err = run(capsys, [*base, "--set", "env.entry_point=hdppo_t_fac:make_zoo"])
    assert code == 2 and "not a gymnasium.Env. It is a PettingZoo env: set env.type: pettingzoo" in err, err
    code, err = run(capsys, [*base, "--set", "env.entry_point=hdppo_t_fac:make_zoo", "--set", "env.type=pettingzoo",
                             "--set", "layers.0.dppo.train_batch_size=256", "--set", "layers.0.ppo.minibatch_size=64"])
    assert code == 0, err
    assert not (scratch / "r").exists() or (scratch / "r" / "summary.json").exists()
    sys.modules.pop("hdppo_t_fac", None)


def test_a_missing_frozen_checkpoint_names_the_field_and_how_it_comes_about(scratch, capsys):
    """ant_navigate in a fresh folder said only that runs/ant_navigate_walk is no run dir; the
    error now names layers[i] (walk).schedule.checkpoint and says to train that run first."""
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--set", "layers.control.schedule.checkpoint=runs/no_walk",
                             "--run-dir", "r"])
    assert code == 2 and "layers[1] (control).schedule.checkpoint: runs/no_walk is neither" in err, err
    assert "train that run first" in err


def test_a_layer_whose_start_after_is_never_reached_is_named_at_the_end(scratch, capsys):
    """A tiny hexapod_terrain run ended with its route layer untrained and nothing said; eval and
    export then went ahead on initial weights. The done line now names the layer and its gate."""
    code = main(["train", CORRIDOR, *TINY, "--set", "layers.strategy.schedule.start_after={layer: control, env_steps: 1000000}",
                 "--run-dir", "r"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert ("layer 'strategy' never trained: its schedule.start_after (layer control, env_steps 1,000,000) was not "
            "reached") in out, out
    import json

    assert json.loads((scratch / "r" / "summary.json").read_text())["never_started"]["strategy"]["env_steps"] == 1000000


def test_a_reward_is_one_number_a_one_element_array_is_read_and_anything_else_is_named(scratch, capsys):
    """np.array([r]) as a reward crashed check-env with a traceback (exit 1) and stopped training as
    'every worker failed'; None was reported as a non-finite reward. A one-element array is read as
    its value; None or a vector is named, with the agent, in one paragraph."""
    scratch_module(scratch, "hdppo_t_rew",
        "import gymnasium as gym, numpy as np\n"
        "from hdppo.envs.builtin.corridor import parallel_env\n"
        "class R(gym.Wrapper):\n"
        "    def __init__(self, env, kind):\n        super().__init__(env); self.kind = kind\n"
        "    def step(self, a):\n"
        "        o, r, te, tr, i = self.env.step(a)\n"
        "        return o, {'array': np.array([r], np.float32), 'none': None}[self.kind], te, tr, i\n"
        "def make(kind='array'):\n    return R(gym.make('CartPole-v1'), kind)\n"
        "class Z:\n"
        "    def __init__(self, env): self.env = env\n"
        "    def __getattr__(self, k): return getattr(self.env, k)\n"
        "    def step(self, actions):\n"
        "        o, r, te, tr, i = self.env.step(actions)\n"
        "        return o, {a: np.array([v, v]) for a, v in r.items()}, te, tr, i\n"
        "def make_zoo(**kw):\n    return Z(parallel_env(**kw))\n")
    base = ["--working-dir", "mods", "--set", "env.id=null"]
    sys.path.insert(0, str(scratch / "mods"))  # check-env imports from the folder it runs in and sys.path
    code, err = run(capsys, ["check-env", "hdppo_t_rew:make"])
    assert code == 0, err
    code, err = run(capsys, ["train", CARTPOLE, *TINY, *SMALL, *base, "--set", "env.entry_point=hdppo_t_rew:make",
                             "--run-dir", "r"])
    assert code == 0, err
    code, err = run(capsys, ["train", CARTPOLE, *TINY, *SMALL, *base, "--set", "env.entry_point=hdppo_t_rew:make",
                             "--set", "env.kwargs={kind: none}", "--run-dir", "r2"])
    assert code == 2 and "step() returned the reward None (NoneType); a reward must be one number" in err, err
    assert not (scratch / "r2").exists()
    code, err = run(capsys, ["train", CORRIDOR, *TINY, *base, "--set", "env.entry_point=hdppo_t_rew:make_zoo",
                             "--run-dir", "r3"])
    assert code == 2 and "returned the reward array([" in err and "for agent 'walker_0'" in err, err
    sys.modules.pop("hdppo_t_rew", None)


def test_an_action_space_no_policy_can_act_in_is_named_by_check_env_and_before_training(scratch, capsys):
    """MultiBinary passed check-env (exit 0) and then failed every worker with a Ray traceback, exit 1."""
    scratch_module(scratch, "hdppo_t_mb",
        "import gymnasium as gym, numpy as np\n"
        "class MB(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)\n"
        "    action_space = gym.spaces.MultiBinary(3)\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        super().reset(seed=seed)\n        return np.zeros(2, np.float32), {}\n"
        "    def step(self, a):\n        return np.zeros(2, np.float32), float(a.sum()), False, False, {}\n"
        "def make():\n    return gym.wrappers.TimeLimit(MB(), 20)\n")
    sys.path.insert(0, str(scratch / "mods"))
    code, err = run(capsys, ["check-env", "hdppo_t_mb:make"])
    assert code == 2 and "acts in MultiBinary(3), which hdppo's policies cannot produce" in err, err
    assert "MultiDiscrete([2, 2, 2])" in err
    code, err = run(capsys, ["train", CARTPOLE, *TINY, *SMALL, "--working-dir", "mods", "--set", "env.id=null",
                             "--set", "env.entry_point=hdppo_t_mb:make", "--run-dir", "r"])
    assert code == 2 and "acts in MultiBinary(3)" in err and not (scratch / "r").exists(), err
    sys.modules.pop("hdppo_t_mb", None)


def test_env_type_pettingzoo_on_a_gymnasium_factory_says_which_type_fits(scratch, capsys):
    scratch_module(scratch, "hdppo_t_gym", "import gymnasium as gym\ndef make():\n    return gym.make('CartPole-v1')\n")
    code, err = run(capsys, ["train", CARTPOLE, *TINY, "--working-dir", "mods", "--set", "env.id=null", "--set",
                             "env.entry_point=hdppo_t_gym:make", "--set", "env.type=pettingzoo", "--run-dir", "r"])
    assert code == 2 and "neither a ParallelEnv nor an AECEnv. It is a gymnasium.Env: set env.type: gymnasium" in err, err
    sys.modules.pop("hdppo_t_gym", None)


def test_a_live_agent_left_out_of_the_observations_is_named(scratch, capsys):
    """A ParallelEnv that drops a live agent from its observation dict trained on that agent's
    stale observation and exited 0 (check-env, through PettingZoo's test, caught it)."""
    scratch_module(scratch, "hdppo_t_drop",
        "from hdppo.envs.builtin.corridor import parallel_env\n"
        "class Drop:\n"
        "    def __init__(self, env): self.env = env\n"
        "    def __getattr__(self, k): return getattr(self.env, k)\n"
        "    def step(self, actions):\n"
        "        o, r, te, tr, i = self.env.step(actions)\n"
        "        o.pop('walker_1', None)\n"
        "        return o, r, te, tr, i\n"
        "def make(**kw):\n    return Drop(parallel_env(**kw))\n")
    code, err = run(capsys, ["train", CORRIDOR, *TINY, "--working-dir", "mods", "--set", "env.id=null",
                             "--set", "env.entry_point=hdppo_t_drop:make", "--set", "env.kwargs.num_agents=2",
                             "--run-dir", "r"])
    assert code == 2 and "step() returned no observation for 'walker_1', still in env.agents" in err, err
    sys.modules.pop("hdppo_t_drop", None)


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_an_env_that_breaks_mid_run_names_its_line_and_keeps_the_run_to_resume(scratch, capsys, backend, request):
    """An env failing on every worker after checkpoints: the error named neither where in the env it
    was raised (the workers' tracebacks were shown nowhere) nor the kept run dir and how to resume."""
    if backend == "ray":
        request.getfixturevalue("ray_session")
    code = main(["train", CARTPOLE, *TINY, *SMALL, "--set", "env.id=null", "--set", f"ray.backend={backend}",
                 "--set", "train.total_env_steps=5000", "--set", "train.checkpoint_every=1",
                 "--set", "env.entry_point=scripted_envs:breaks_later", "--run-dir", "r"])
    # (Ray's own logger may write to this test's stderr too: the error is the paragraph at the end.)
    err = " ".join(capsys.readouterr().err.split("hdppo train: error:")[-1].split())
    assert code == 2 and "RuntimeError: simulator blew up, raised at " in err, err
    assert "scripted_envs.py, line " in err and ", in step)" in err, err
    assert "The run dir r is kept with its last checkpoint (ckpt_" in err and "--run-dir r --resume" in err, err
    assert list((scratch / "r" / "checkpoints").glob("ckpt_*.pt"))
    if backend == "local":
        # A resume refused at its start (another network than the checkpoint's) says why, and not
        # "once that is fixed, continue it with:" the command that was just refused.
        code = main(["train", CARTPOLE, *TINY, *SMALL, "--set", "env.id=null", "--set", "ray.backend=local",
                     "--set", "train.total_env_steps=5000", "--set", "env.entry_point=scripted_envs:breaks_later",
                     "--set", "layers.0.policy.hidden=[8]", "--run-dir", "r", "--resume"])
        err = " ".join(capsys.readouterr().err.split())
        assert code == 2 and "trained with another config" in err and "continue it with" not in err, err
    if backend == "ray":  # the Ray it found running (the test session's: a notebook's) is left running
        import ray

        assert ray.is_initialized()


def test_worker_cpus_beyond_the_machine_is_refused_at_once(scratch, capsys):
    """worker_cpus: 100 on 2 cores waited 120 s for Ray to place a worker it never could."""
    code, err = run(capsys, ["train", CARTPOLE, *TINY, "--set", "ray.num_cpus=2",
                             "--set", "layers.0.dppo.worker_cpus=100", "--run-dir", "r"])
    assert code == 2 and "layers[0] (control).dppo.worker_cpus is 100, more than the 2 CPUs Ray reports" in err, err
    assert not (scratch / "r").exists()
