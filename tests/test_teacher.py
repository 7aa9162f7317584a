"""Kickstarting (``layers[].teacher``): a scripted teacher labels each decision and the loss adds
its negative log-likelihood. On a task whose training reward is always zero, PPO alone has
nothing to learn from, and only the teacher can teach the mapping; the same run without the
teacher stays at chance. Also: the teacher's schedule, its metrics, and the errors."""
import gymnasium as gym
import numpy as np
import pytest

from conftest import tiny_config
from hdppo.envs.teachers import vectorized_teacher
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.evaluation import evaluate_episodes
from hdppo.platform.trainer import Trainer

STEPS = 16
CLASSES = 8  # a random initial policy matches about one class in eight


class Classify(gym.Env):
    """A one-hot class each step; the right action is the class. Reward ``reward`` per right
    action: 0 while training (no signal for PPO), 1 to score an evaluation."""

    observation_space = gym.spaces.Box(0.0, 1.0, (CLASSES,), np.float32)
    action_space = gym.spaces.Discrete(CLASSES)

    def __init__(self, reward: float = 0.0):
        self.reward = reward

    def _obs(self):
        self.k = int(self.np_random.integers(CLASSES))
        return np.eye(CLASSES, dtype=np.float32)[self.k]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        r = self.reward * float(int(action) == self.k)
        self.t += 1
        return self._obs(), r, False, self.t >= STEPS, {}


def class_teacher(raw_obs, members, env, offset: int = 0):
    """The right action (shifted by ``offset``, to check that kwargs arrive)."""
    return (int(np.argmax(raw_obs[members[0]])) + offset) % CLASSES


def _config(teacher: dict | None, steps: int = 3072) -> dict:
    layer = {"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 4, "lr": 3e-3, "entropy_coeff": 0.0},
             "dppo": {"num_workers": 1, "num_envs_per_worker": 4, "train_batch_size": 256},
             "normalization": {"observation": False, "reward": False}}
    if teacher is not None:
        layer["teacher"] = teacher
    return tiny_config(env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 0.0}}, layers=[layer],
                       train={"total_env_steps": steps, "checkpoint_every": 100, "eval_episodes": 0})


def _right_per_episode(cfg_dict: dict, run_dir) -> float:
    scored = dict(cfg_dict, env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 1.0}})
    states = learner_states(load_checkpoint(latest_checkpoint(run_dir)))
    eps = evaluate_episodes(validate(scored), states, 16, seed=11, num_envs=4)
    return float(np.mean([e.ret for e in eps]))


def test_a_teacher_teaches_what_a_zero_reward_cannot(tmp_path):
    taught = _config({"policy": "test_teacher:class_teacher", "coeff": 1.0, "coeff_final": 1.0, "anneal": 1.0})
    alone = _config(None)
    Trainer(validate(taught), tmp_path / "taught", quiet=True).train()
    Trainer(validate(alone), tmp_path / "alone", quiet=True).train()
    right_taught = _right_per_episode(taught, tmp_path / "taught")
    right_alone = _right_per_episode(alone, tmp_path / "alone")
    assert right_taught >= 0.9 * STEPS, right_taught           # it follows the teacher
    assert right_alone <= 0.5 * STEPS, right_alone             # chance: STEPS / CLASSES


def test_the_teacher_term_is_logged_and_anneals(tmp_path):
    import json

    cfg = _config({"policy": "test_teacher:class_teacher", "kwargs": {"offset": 1}, "coeff": 2.0,
                   "coeff_final": 0.0, "anneal": 0.5}, steps=2048)
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    coeff = [r["value"] for r in rows if r["tag"] == "charts/teacher_coeff"]
    nll = [r["value"] for r in rows if r["tag"] == "losses/teacher_nll"]
    assert coeff[0] > 1.0 and coeff[-1] == 0.0 and all(a >= b for a, b in zip(coeff, coeff[1:]))
    # Logged while the teacher's weight is above zero (after that the term is not computed).
    assert len(nll) == sum(c > 0 for c in coeff) >= 3 and nll[-1] < 0.5 * nll[0]   # it learned the (shifted) labels
    # The labels came through kwargs: the policy picks class + 1, not the class.
    scored = dict(cfg, env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 1.0}})
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    right = np.mean([e.ret for e in evaluate_episodes(validate(scored), states, 8, seed=5, num_envs=4)])
    assert right <= 0.5 * STEPS


class ShiftingClassify(Classify):
    """Classify whose classes shift once: 0-3 for its first ``switch`` steps, 4-7 after. Each
    copy counts its own steps, across episodes; ``switch=-1`` shows 0-3 only. Class k is seen as
    the one-hot of k mod 4 plus a bit for k >= 4: the two halves look alike but one bit, as a
    skill's rare hard states resemble its common ones."""

    def __init__(self, reward: float = 0.0, switch: int = -1):
        super().__init__(reward)
        self.switch, self.lifetime = switch, 0

    def _obs(self):
        late = self.switch >= 0 and self.lifetime >= self.switch
        self.lifetime += 1
        self.k = int(self.np_random.integers(4)) + (4 if late else 0)
        obs = np.zeros(CLASSES, np.float32)
        obs[self.k % 4], obs[4] = 1.0, float(late)
        return obs


def shifting_teacher(raw_obs, members, env):
    obs = raw_obs[members[0]]
    return int(np.argmax(obs[:4])) + 4 * int(obs[4])


def test_teacher_replay_keeps_what_the_latest_rollouts_no_longer_show(tmp_path):
    """The first half of the run shows classes 0-3, the second half 4-7. Fitted on fresh samples
    only, the policy forgets 0-3; with ``teacher.replay`` (DAgger's aggregated data) it keeps them."""
    import json

    def run(name: str, replay: int) -> float:
        cfg = _config({"policy": "test_teacher:shifting_teacher", "coeff": 1.0, "coeff_final": 1.0, "anneal": 1.0,
                       "replay": replay})
        cfg["env"] = {"entry_point": "test_teacher:ShiftingClassify", "kwargs": {"reward": 0.0, "switch": 384}}
        Trainer(validate(cfg), tmp_path / name, quiet=True).train()
        early = dict(cfg, env={"entry_point": "test_teacher:ShiftingClassify", "kwargs": {"reward": 1.0, "switch": -1}})
        states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / name)))
        return float(np.mean([e.ret for e in evaluate_episodes(validate(early), states, 16, seed=11, num_envs=4)]))

    fresh_only, replayed = run("fresh", 0), run("replay", 4096)
    assert fresh_only <= 0.5 * STEPS, fresh_only     # classes 0-3 forgotten
    assert replayed >= 0.9 * STEPS, replayed         # kept
    rows = [json.loads(line) for line in (tmp_path / "replay" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["tag"] == "losses/teacher_nll_replay" for r in rows)
    assert not any(r["tag"] == "losses/teacher_nll_replay"
                   for r in map(json.loads, (tmp_path / "fresh" / "metrics.jsonl").read_text().splitlines()))


def test_teacher_replay_ring_keeps_the_newest_rows():
    from hdppo.policies.teacher_replay import TeacherReplay

    ring = TeacherReplay(5)
    with pytest.raises(ValueError, match="empty"):
        ring.sample(1, np.random.default_rng(0))
    rows = lambda lo, hi: (np.arange(lo, hi, dtype=np.float32)[:, None], np.arange(lo, hi, dtype=np.float32)[:, None],  # noqa: E731
                           np.zeros((hi - lo, 0), np.float32))
    ring.add(*rows(0, 3))
    assert ring.size == 3 and set(ring.sample(200, np.random.default_rng(0))[0].ravel()) == {0, 1, 2}
    ring.add(*rows(3, 7))                                  # wraps: 0 and 1 overwritten
    obs, teacher, masks = ring.sample(400, np.random.default_rng(1))
    assert ring.size == 5 and set(obs.ravel()) == {2, 3, 4, 5, 6} and (obs == teacher).all() and masks.shape == (400, 0)
    ring.add(*rows(10, 22))                                # more than it holds: the newest five
    assert set(ring.sample(400, np.random.default_rng(2))[0].ravel()) == {17, 18, 19, 20, 21}


def test_teacher_errors_name_the_field(tmp_path):
    bad = _config({"policy": "test_teacher:no_such_function"})
    with pytest.raises(ConfigError, match=r"layer 'control', teacher.policy: .*no attribute 'no_such_function'"):
        Trainer(validate(bad), tmp_path / "a", quiet=True).train()
    wrong = _config({"policy": "test_teacher:two_values"})
    with pytest.raises(Exception, match=r"teacher.policy: test_teacher:two_values returned 2 value\(s\).*have 1"):
        Trainer(validate(wrong), tmp_path / "b", quiet=True).train()
    dppo = _config({"policy": "test_teacher:class_teacher"})
    dppo["layers"][0]["dppo"]["mode"] = "dppo"
    with pytest.raises(Exception, match="teacher needs dppo.mode 'central'"):
        validate(dppo)
    with pytest.raises(ConfigError, match=r"teacher.*replay"):
        validate(_config({"policy": "test_teacher:class_teacher", "replay": -1}))
    assert not (tmp_path / "a" / "checkpoints").exists()


def eight(raw_obs, members, env):
    return CLASSES  # one past Discrete(8)


def minus_one(raw_obs, members, env):
    return -1


def nothing(raw_obs, members, env):
    return None


def not_a_number(raw_obs, members, env):
    return float("nan")


def a_word(raw_obs, members, env):
    return "left"


@vectorized_teacher
def batched_eight(env, copies, members, command):
    return np.full(len(copies), CLASSES)


@pytest.mark.parametrize("name, shown", [("eight", "returned 8"), ("minus_one", "returned -1 for lane 'agent_0'"),
                                         ("nothing", "returned None for lane 'agent_0', not numbers"),
                                         ("not_a_number", "returned nan"),
                                         ("a_word", "returned 'left' for lane 'agent_0', not numbers"),
                                         ("batched_eight", r"\(vectorised\) returned 8 for lane 'agent_0'")])
def test_a_teacher_action_outside_the_action_space_is_named(tmp_path, name, shown):
    from hdppo.envs.errors import EnvError

    cfg = _batched_config({"policy": f"test_teacher:{name}"}, 512) if name == "batched_eight" else \
        _config({"policy": f"test_teacher:{name}"}, 512)
    with pytest.raises(EnvError, match=rf"layer 'control', teacher.policy: test_teacher:{name}.*{shown}.*"
                                       rf"integer actions in \[0, 7\] \(the layer's action space Discrete\(8\)\)"):
        Trainer(validate(cfg), tmp_path / "run", quiet=True).train()


def two_values(raw_obs, members, env):
    return [0, 1]


class BatchedClassify:
    """Classify as a natively vectorised env (``env.type: vector``): N copies as one array, no
    per-copy Python objects, so a per-lane teacher (which needs raw observations) cannot serve it."""

    def __init__(self, num_envs: int, seed=None, reward: float = 0.0):
        self.num_envs, self.reward = num_envs, reward
        self.agents, self.name = ["agent_0"], "batched_classify"
        self.obs_dim, self.mask_dim, self.state_dim, self.want_state = CLASSES, 0, None, False
        self.rng = np.random.default_rng(seed)
        self.k = np.zeros(num_envs, np.int64)
        self.t = np.zeros(num_envs, np.int64)
        self.ret = np.zeros(num_envs)

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (CLASSES,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(CLASSES)

    def _view(self):
        from hdppo.envs.vector import VecObs

        self.k = self.rng.integers(CLASSES, size=self.num_envs)
        ones = np.ones((self.num_envs, 1), bool)
        return VecObs(np.eye(CLASSES, dtype=np.float32)[self.k][:, None], ones, ones, None, None)

    def reset(self, seed=None):
        self.t[:] = 0
        self.ret[:] = 0.0
        return self._view()

    def step(self, actions):
        from hdppo.envs.vector import VecStep

        r = self.reward * (actions[:, 0] == self.k)
        self.t += 1
        self.ret += r
        end = self.t >= STEPS
        final = np.eye(CLASSES, dtype=np.float32)[self.k][:, None]
        episodes = [(float(self.ret[i]), STEPS, int(i)) for i in np.flatnonzero(end)]
        self.t[end], self.ret[end] = 0, 0.0
        v = self._view()
        return VecStep(v.obs, v.alive, v.acting, None, None, rewards=r[:, None].astype(np.float64),
                       terminated=np.zeros((self.num_envs, 1), bool), truncated=end[:, None], final_obs=final,
                       episode_end=end, episodes=episodes)

    def close(self):
        pass


TEACHER_CALLS: list[tuple] = []   # what the vectorised teacher was handed (the local backend: this process)


@vectorized_teacher
def batched_class_teacher(env, copies, members, command, offset: int = 0):
    """The right class of every lane that decided, in one call."""
    TEACHER_CALLS.append((copies.copy(), [list(m) for m in members], command))
    return (env.k[copies] + offset) % CLASSES


@vectorized_teacher
def batched_one_short(env, copies, members, command):
    return np.zeros(len(copies) - 1)


def _batched_config(teacher: dict, steps: int = 3072) -> dict:
    cfg = _config(teacher, steps)
    cfg["env"] = {"type": "vector", "entry_point": "test_teacher:BatchedClassify", "kwargs": {"reward": 0.0}}
    return cfg


def test_a_vectorized_teacher_serves_a_natively_vectorized_env(tmp_path):
    """A ``@vectorized_teacher`` is called once per step for every copy's lane, with the copies,
    the lanes' agent indices and no command (a top layer), and teaches as the per-lane one does."""
    TEACHER_CALLS.clear()
    cfg = _batched_config({"policy": "test_teacher:batched_class_teacher", "coeff": 1.0, "coeff_final": 1.0,
                           "anneal": 1.0})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    assert TEACHER_CALLS, "the vectorised teacher was never called"
    copies, members, command = TEACHER_CALLS[0]
    assert list(copies) == [0, 1, 2, 3] and members == [[0]] * 4 and command is None
    scored = dict(cfg, env={"type": "vector", "entry_point": "test_teacher:BatchedClassify", "kwargs": {"reward": 1.0}})
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    right = np.mean([e.ret for e in evaluate_episodes(validate(scored), states, 16, seed=11, num_envs=4)])
    assert right >= 0.9 * STEPS, right


def test_a_vectorized_teacher_of_the_wrong_size_is_named(tmp_path):
    cfg = _batched_config({"policy": "test_teacher:batched_one_short"}, steps=512)
    with pytest.raises(Exception, match=r"teacher.policy: test_teacher:batched_one_short \(vectorised\) returned "
                                        r"\(3,\) for 4 lanes"):
        Trainer(validate(cfg), tmp_path / "run", quiet=True).train()


def _trained_briefly(tmp_path, cfg: dict):
    """A run of a few hundred steps (its policy still near chance) with a teacher in its config."""
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    return learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))


@pytest.mark.parametrize("teacher", ["test_teacher:class_teacher", "test_teacher:batched_class_teacher"])
def test_a_scripted_layer_acts_by_its_teacher_in_evaluation(tmp_path, teacher):
    """``scripted=[layer]``: the layer's actions are its teacher's (per-lane and vectorised), so
    every step is right; the same weights acting themselves are not."""
    cfg = _config({"policy": teacher, "coeff": 0.1}, steps=512) if teacher.endswith(":class_teacher") \
        else _batched_config({"policy": teacher, "coeff": 0.1}, steps=512)
    states = _trained_briefly(tmp_path, cfg)
    env = dict(cfg["env"], kwargs={"reward": 1.0})
    scored = validate(dict(cfg, env=env))
    scripted = [e.ret for e in evaluate_episodes(scored, states, 8, seed=3, num_envs=4, scripted=["control"])]
    own = [e.ret for e in evaluate_episodes(scored, states, 8, seed=3, num_envs=4)]
    assert scripted == [float(STEPS)] * 8, scripted
    assert np.mean(own) < 0.9 * STEPS, own


def test_hdppo_eval_scripted_from_the_command_line(tmp_path, capsys):
    import json

    from hdppo.platform.cli import main

    cfg = _config({"policy": "test_teacher:class_teacher", "coeff": 0.1}, steps=512)
    cfg["env"]["kwargs"] = {"reward": 1.0}
    _trained_briefly(tmp_path, cfg)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--episodes", "4", "--seed", "5", "--scripted", "control", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["scripted"] == ["control"] and out["return_mean"] == STEPS, out
    # A layer without a teacher, or none of that name, is refused by name.
    assert main(["eval", str(tmp_path / "run"), "--episodes", "1", "--scripted", "strategy"]) != 0
    assert "scripted layer 'strategy': the config has no such layer (its layers: control)" in capsys.readouterr().err


def test_a_scripted_layer_needs_a_teacher(tmp_path):
    cfg = _config(None, steps=512)
    states = _trained_briefly(tmp_path, cfg)
    with pytest.raises(ConfigError, match=r"scripted layer 'control': it has no teacher.policy to act with"):
        evaluate_episodes(validate(cfg), states, 1, num_envs=1, scripted=["control"])


def test_the_teacher_term_pulls_hardest_on_the_decisions_the_student_gets_most_wrong():
    """A Gaussian student of std 0.08 far from its teacher: the rows it gets most wrong have a
    log-likelihood far below -20, and they must still pull the mean toward the teacher, harder
    than the rows it nearly gets right (a floor on the log-likelihood zeroed exactly them)."""
    import torch

    from hdppo.policies.networks import make_policy
    from hdppo.policies.ppo_loss import teacher_nll

    torch.manual_seed(0)
    policy = make_policy(4, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), (16,), init_log_std=-2.5)
    obs = torch.randn(4, 4)
    with torch.no_grad():
        _, _, mean = policy.log_prob_entropy(obs, torch.zeros(4, 3), with_mean=True)
    errors = torch.tensor([0.05, 0.3, 0.7, 1.0])
    teacher = mean + errors[:, None] * torch.tensor([1.0, 0.0, 0.0])
    grads = []
    for row in range(4):  # each row's own gradient, over all of the policy's parameters
        policy.zero_grad()
        logp, _ = policy.log_prob_entropy(obs[row:row + 1], teacher[row:row + 1])
        teacher_nll(logp).backward()
        grads.append(float(torch.cat([p.grad.norm().reshape(1) for p in policy.parameters() if p.grad is not None]).norm()))
        if row >= 2:
            assert float(logp.detach()) < -20.0, "the test needs rows below the old floor"
    assert all(g > 0.0 for g in grads) and grads[0] < grads[1] < grads[2] < grads[3], grads


def test_a_teacher_action_the_mask_forbids_is_left_out_of_the_term():
    import torch

    from hdppo.policies.networks import make_policy
    from hdppo.policies.ppo_loss import teacher_nll

    torch.manual_seed(0)
    policy = make_policy(4, gym.spaces.Discrete(3), (16,))
    obs = torch.randn(2, 4)
    masks = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    logp, _ = policy.log_prob_entropy(obs, torch.tensor([[0.0], [2.0]]), masks)  # row 1's label is masked
    loss = teacher_nll(logp)
    loss.backward()
    assert float(logp[1].detach()) < -1e6 and 0.0 < float(loss) < 10.0
    assert torch.isclose(loss, -logp[0] / 2)           # the illegal row counts as zero in the mean
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)


@vectorized_teacher
def relay_teacher(env, copies, members, command):
    """Carries out the layer above's command: the action is the commanded class."""
    return np.argmax(command, axis=1)


def _over_scripted(mode: str, teacher: dict | None, steps: int = 4096) -> dict:
    """A trained upper layer that sees the class and commands the bottom layer, which acts by
    ``relay_teacher`` (``schedule.mode: scripted``) or otherwise as ``mode`` says; reward 1 per
    right action."""
    cfg = _batched_config({"policy": "test_teacher:relay_teacher"}, steps)
    cfg["env"]["kwargs"] = {"reward": 1.0}
    bottom = dict(cfg["layers"][0], observation={"source": "env", "command": True}, schedule={"mode": mode})
    if teacher is None:
        bottom.pop("teacher")
    upper = dict(cfg["layers"][0], name="pick", action={"type": "discrete", "n": CLASSES},
                 observation={"source": "env"})
    upper.pop("teacher")
    cfg["layers"] = [upper, bottom]
    return cfg


def test_upper_layers_train_over_a_scripted_layer(tmp_path):
    """``schedule.mode: scripted``: the layer acts by its teacher in training and in evaluation,
    has no DPPO group and never updates, and the layer above learns over it."""
    cfg = validate(_over_scripted("scripted", {"policy": "test_teacher:relay_teacher"}))
    assert cfg.layer_groups() == [["pick"]] and cfg.scripted_layers() == ["control"]
    assert not cfg.layer("control").learns
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert list(state["groups"]) == ["pick"] and "control" in state["fixed"]
    states = learner_states(state)
    right = np.mean([e.ret for e in evaluate_episodes(cfg, states, 16, seed=11, num_envs=4)])
    assert right >= 0.9 * STEPS, right            # the upper layer learned to command the class
    # The bottom layer's own weights do not relay: played by them, the same upper layer is near chance.
    own = dict(cfg.model_dump(mode="json"))
    own["layers"][1]["schedule"] = {"mode": "frozen"}
    by_weights = np.mean([e.ret for e in evaluate_episodes(validate(own), states, 16, seed=11, num_envs=4)])
    assert by_weights <= 0.5 * STEPS, by_weights


def test_a_scripted_mode_needs_a_teacher():
    with pytest.raises(ConfigError, match=r"schedule.mode 'scripted' acts by the layer's teacher, and the layer has none"):
        validate(_over_scripted("scripted", None))
