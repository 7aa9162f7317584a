"""The one-sampler engine against the engine an Ant-v5 result was measured with, on the same data.

Issue 9 asks that every recorded result keep working; Ant-v5 at 3M env steps reached 4181 with
the engine of 2026-11-29 (commit ``db4796a``) and about 1500 on two runs since. Trajectories of
two engines cannot be compared step for step once sampling noise differs, so this runs both on
*the same* trajectory: ``configs/ant.yaml``, one worker, actions a fixed deterministic function
of the observation (``0.5 sin(7 x R)``, ``R`` a seeded Gaussian matrix: varied enough that the
ant falls and episodes end by termination as well as by the time limit), log-probabilities the
policy's own for those actions. For each engine, in its own process (the old one imported from
``git archive`` of its commit, as ``old_commit.py`` does):

1. **sampler, GAE, reward scaling**: three rollouts of 2048 env steps with observation
   normalization off (the trajectory is then identical); the batches' observations, values,
   advantages and returns compared element by element;
2. **learner**: three ``update_central`` calls on those rollouts from the same initial weights,
   the losses, KL and clip fraction compared;
3. **observation normalizer**: the same raw observation stream through both normalizers;
4. **the whole training loop, sampled actions**: ``hdppo train`` itself (trainer, sync mode,
   parameter service, workers, learner), on the local backend and on Ray, for each engine. A
   ``sitecustomize`` on the subprocesses' path (Ray's workers inherit it) makes every policy
   draw its Gaussian noise from a stream of its own worker's index, so two engines that compute
   the same thing sample the same actions: their first rollouts and first updates must agree.
   A fifth arm runs the current engine with the old ``ObservationNormalizer`` swapped in, which
   removes the one float-level difference of sampling (section 3), so that rollout 1 is
   bit-identical. Later updates drift apart from float rounding of the first one, amplified by
   the simulator's contacts: only the first update is a test of equality.
5. **many updates, no contacts**: section 4's harness on Pendulum-v1 (episodes end by truncation
   only) for 30 updates, the current engine with and without its three deliberate float-level
   differences patched out (its observation normalizer; when a truncated episode's final
   observation is normalized; the reward scaler's prior). With all three out, the engines must
   agree to float rounding until PPO's clipping, whose decisions flip on rounding, amplifies it:
   a structural difference in any update would show as a jump there.

Usage:
    python benchmarks/engine_equivalence.py [--old-commit db4796a]

Writes benchmarks/results/engine_equivalence.{json,md}.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, save_files  # noqa: E402
from machine import machine_info  # noqa: E402
from old_commit import hdppo_train, old_tree  # noqa: E402

OLD_COMMIT = "db4796a"  # the engine of the Ant-v5 4181 run (2026-11-29)
FIELDS = ("obs", "actions", "logp", "values", "advantages", "returns")
LOSSES = ("losses/policy", "losses/value", "losses/entropy", "losses/approx_kl", "losses/clipfrac")

# Run inside each engine's process: argv = out.npz, obs_norm (0/1), init weights path.
_CHILD = r'''
import json, os, sys, yaml, torch, numpy as np, gymnasium as gym
from hdppo.platform.config import validate
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.rollout_worker import RolloutWorker
from hdppo.platform.learner import Learner
import hdppo.policies.networks as N
out, obs_norm, init = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
act = N.ActorCritic.act
R = np.random.default_rng(0).standard_normal((27, 8)).astype(np.float32)
def fixed(self, obs, deterministic=False, *a, **k):
    _, _, v = act(self, obs, True, *a, **k)
    x = obs.numpy() if hasattr(obs, "numpy") else np.asarray(obs)
    acts = (0.5 * np.sin(x @ R * 7.0)).astype(np.float32)
    with torch.no_grad():
        lp, _ = self.log_prob_entropy(torch.as_tensor(x), torch.as_tensor(acts))
    return acts, lp.numpy(), v
N.ActorCritic.act = fixed
cfg = yaml.safe_load(open(os.environ["HDPPO_ANT_CONFIG"]))
cfg.pop("description", None)  # older schemas have no description
cfg["ray"] = {"backend": "local"}
cfg["layers"][0]["normalization"]["observation"] = obs_norm
cfg["layers"][0]["dppo"]["num_workers"] = 1
c = validate(cfg)
svc = ParameterService()
w = RolloutWorker(c, ["control"], 0, 1, svc)
L = Learner(c, "control", 27, gym.spaces.Box(-1, 1, (8,), np.float32), svc)
if not os.path.exists(init):
    torch.save(w.policies["control"].state_dict(), init)
for p in (w.policies["control"], L.policy):
    p.load_state_dict(torch.load(init))
arrays, losses, lengths = {}, [], []
for k in range(3):
    r = w.sample()["control"]
    for f in %(fields)r:
        arrays.setdefault(f, []).append(np.asarray(getattr(r.batch, f), np.float64))
    lengths += [int(x) for x in getattr(r.stats, "episode_lengths", [])]
    res = L.update_central(r)
    m = res.metrics if hasattr(res, "metrics") else res
    losses.append({key: float(m[key]) for key in %(losses)r if key in m})
    w.policies["control"].load_state_dict(L.policy.state_dict())
np.savez(out, **{f: np.concatenate(v) for f, v in arrays.items()})
print("RESULT " + json.dumps({"losses": losses, "episode_lengths": lengths, "files": N.__file__}))
''' % {"fields": FIELDS, "losses": LOSSES}


# Section 4's sitecustomize: patches whichever hdppo a process imports, when it imports it.
_SITE = r'''
import importlib.abc, importlib.util, os, sys
_TARGETS = ("hdppo.policies.networks", "hdppo.platform.rollout_worker", "hdppo.hierarchies.engine")
class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            {"networks": _patch_policy, "rollout_worker": _patch_worker, "engine": _patch_engine}[name.rsplit(".", 1)[1]](module)
        spec.loader.exec_module = exec_module
        return spec
def _patch_policy(N):
    if os.environ.get("HDPPO_REPLAY_OWN_NOISE"):  # keep the engine's own noise (a long A/B run, not a replay)
        return
    import numpy as np, torch
    streams = {}
    def act(self, obs, deterministic=False, masks=None, critic_obs=None, with_value=True, **kw):
        with torch.no_grad():
            obs = torch.as_tensor(obs)
            d = self._dists(obs, masks)
            if deterministic:
                a = d.mean
            else:  # the noise stream of this policy's worker (index set by the worker patch)
                i = self.__dict__.get("_replay_worker", -1)
                rng = streams.setdefault(i, np.random.default_rng(1000 + i))
                a = d.mean + d.stddev * torch.as_tensor(rng.standard_normal(tuple(d.mean.shape)), dtype=torch.float32)
            logp = d.log_prob(a).sum(-1)
            v = self.value(obs, critic_obs) if with_value else None
        return a.numpy(), logp.numpy(), (None if v is None else v.numpy())
    N.ActorCritic.act = act
def _patch_worker(RW):
    init = RW.RolloutWorker.__init__
    def __init__(self, cfg, layers, worker_index, *a, **k):
        init(self, cfg, layers, worker_index, *a, **k)
        for p in self.policies.values():
            p.__dict__["_replay_worker"] = worker_index
    RW.RolloutWorker.__init__ = __init__
    swap = os.environ.get("HDPPO_REPLAY_OBS_NORMALIZER")
    if swap:  # another tree's normalizers.py: its ObservationNormalizer replaces this one
        spec = importlib.util.spec_from_file_location("_replay_normalizers", swap)
        m = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = m
        spec.loader.exec_module(m)
        RW.ObservationNormalizer = m.ObservationNormalizer
    if os.environ.get("HDPPO_REPLAY_SCALER_PRIOR0"):  # the old RewardScaler's start: no prior weight
        RW.RewardScaler.PRIOR_COUNT = 0.0
def _patch_engine(E):
    # HDPPO_REPLAY_LATE_BOOT: normalize a truncated episode's final observation when the values
    # are computed (at the end of the rollout), as the old engine did, not at its step.
    if not os.environ.get("HDPPO_REPLAY_LATE_BOOT") or not hasattr(E, "Sampler"):
        return
    close, flush = E.Sampler._close, E.Sampler.flush_values
    def _close(self, p, buf, closing, end, truncated=None, res=None, cut=False):
        if cut:
            return close(self, p, buf, closing, end, truncated, res, cut)
        real, k0 = self.obs_norms[p.name], len(buf.boot_obs)
        self.obs_norms[p.name] = lambda x: x.copy()
        try:
            close(self, p, buf, closing, end, truncated, res, cut)
        finally:
            self.obs_norms[p.name] = real
        late = buf.__dict__.setdefault("_late", {})
        for k in range(k0, len(buf.boot_obs)):
            late[k] = real
    def flush_values(self):
        for buf in self.buffers.values():
            for k, norm in buf.__dict__.pop("_late", {}).items():
                buf.boot_obs[k] = norm(buf.boot_obs[k])
        flush(self)
    E.Sampler._close, E.Sampler.flush_values = _close, flush_values
sys.meta_path.insert(0, _Hook())
'''
REPLAY_TAGS = ("charts/episodes", "charts/episodic_return", "losses/policy", "losses/value", "losses/entropy",
               "losses/approx_kl", "losses/clipfrac")
# An arm: (engine, backend, patches). Patches remove the current engine's deliberate float-level
# differences from the old one: "oldnorm" its ObservationNormalizer (float32, recomputed when
# stale), "lateboot" the time a truncated episode's final observation is normalized, "prior0"
# the RewardScaler's prior weight (it changes the first steps' reward scale).
REPLAY_ARMS = (("old", "local", ()), ("old", "ray", ()), ("new", "local", ()), ("new", "ray", ()),
               ("new", "local", ("oldnorm",)))
PENDULUM_ARMS = (("old", "local", ()), ("new", "local", ()), ("new", "local", ("oldnorm",)),
                 ("new", "local", ("oldnorm", "lateboot", "prior0")))
PATCH_LABELS = {"oldnorm": "old ObservationNormalizer", "lateboot": "final observation normalized late",
                "prior0": "no reward-scaler prior"}


def patch_env(old_root: Path, patches: tuple[str, ...]) -> dict[str, str]:
    """The environment variables that turn on ``patches`` in the ``sitecustomize`` (``_SITE``)."""
    env = {}
    if "oldnorm" in patches:
        env["HDPPO_REPLAY_OBS_NORMALIZER"] = str(old_root / "hdppo" / "policies" / "normalizers.py")
    if "lateboot" in patches:
        env["HDPPO_REPLAY_LATE_BOOT"] = "1"
    if "prior0" in patches:
        env["HDPPO_REPLAY_SCALER_PRIOR0"] = "1"
    return env


def training_replay(tmp: Path, old_root: Path, updates: int, env: dict | None = None,
                    arms_spec: tuple = REPLAY_ARMS) -> dict:
    """Sections 4 and 5: ``hdppo train`` with ``configs/ant.yaml``'s settings (on ``env`` if
    given) for ``updates`` updates in each arm; per update, the metrics of ``REPLAY_TAGS``."""
    from hdppo.platform.metrics import read_jsonl

    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITE)
    cfg = yaml.safe_load((HERE.parent / "configs" / "ant.yaml").read_text())
    cfg.pop("description", None)  # older schemas have no description
    if env is not None:
        cfg["env"] = env
    cfg["train"].update(eval_episodes=0, checkpoint_every=10_000,
                        total_env_steps=updates * cfg["layers"][0]["dppo"]["train_batch_size"])
    arms = []
    for engine, backend, patches in arms_spec:
        c = copy.deepcopy(cfg)
        c["ray"] = {"backend": backend}
        name = "_".join((cfg["env"]["id"], engine, backend) + tuple(patches))
        hdppo_train(c, tmp / name, old_root if engine == "old" else None, extra_paths=(site,),
                    extra_env=patch_env(old_root, patches),
                    timeout_s=1800)
        per_update: dict[int, dict[str, float]] = {}
        for r in read_jsonl(tmp / name / "metrics.jsonl"):
            if r["tag"] in REPLAY_TAGS:
                per_update.setdefault(r["step"], {})[r["tag"]] = r["value"]
        label = ", ".join([f"{engine} engine, {backend} backend"] + [PATCH_LABELS[k] for k in patches])
        arms.append({"arm": label, "updates": [per_update[k] for k in sorted(per_update)]})
    return {"updates": updates, "env": cfg["env"], "arms": arms}


# The smooth metrics of section 5 (KL and clip fraction are small counts that jump on one clip decision).
SMOOTH_TAGS = ("charts/episodic_return", "losses/value", "losses/entropy")


def divergence(a: list[dict], b: list[dict], tags: tuple[str, ...] = SMOOTH_TAGS) -> list[float]:
    """Per update, the largest relative difference of the metrics ``tags`` between two arms."""
    return [max(abs(x[t] - y[t]) / max(abs(x[t]), 1e-12) for t in tags if t in x and t in y and x[t] != 0)
            for x, y in zip(a, b)]


def run_engine(tmp: Path, tag: str, obs_norm: bool, import_root: Path | None) -> tuple[dict, dict]:
    script = tmp / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, HDPPO_ANT_CONFIG=str(HERE.parent / "configs" / "ant.yaml"))
    env.pop("PYTHONPATH", None)
    if import_root is not None:
        env["PYTHONPATH"] = str(import_root)
    out = tmp / f"{tag}_{int(obs_norm)}.npz"
    proc = subprocess.run([sys.executable, str(script), str(out), str(int(obs_norm)), str(tmp / "init.pt")],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} engine failed: {(proc.stdout + proc.stderr)[-2000:]}")
    info = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    data = np.load(out)
    return {f: data[f] for f in data.files}, info


def compare(a: dict, b: dict, rollouts: int = 3) -> dict:
    """Per batch field and rollout: the first rollout acts with the shared initial weights, the
    later ones with each engine's own update of them (equal to float rounding, which then grows)."""
    out = {}
    for f in FIELDS:
        d = np.abs(a[f] - b[f]).reshape(len(a[f]), -1).max(1)
        out[f] = [{"rollout": k + 1, "rows": int(len(part)), "max_abs_diff": float(part.max()),
                   "mean_abs_diff": float(part.mean()), "rows_over_1e-3": int((part > 1e-3).sum())}
                  for k, part in enumerate(np.array_split(d, rollouts))]
    return out


def normalizer_stream(old_root: Path, raw_obs: np.ndarray) -> dict:
    """The same raw stream through both ObservationNormalizers, in one process each."""
    code = r'''
import sys, json, numpy as np
from hdppo.policies.normalizers import ObservationNormalizer
raw = np.load(sys.argv[1])["obs"].astype(np.float32)
rng = np.random.default_rng(0)
stream = np.concatenate([raw + rng.normal(0, 0.05, raw.shape).astype(np.float32) for _ in range(10)])
n = ObservationNormalizer((raw.shape[1],))
out = []
for o in stream:
    n.observe(o[None]); out.append(n(o[None])[0])
np.save(sys.argv[2], np.asarray(out))
'''
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "raw.npz"
        np.savez(src, obs=raw_obs)
        outs = []
        for tag, root in (("new", None), ("old", old_root)):
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            if root is not None:
                env["PYTHONPATH"] = str(root)
            dst = Path(d) / f"{tag}.npy"
            subprocess.run([sys.executable, "-c", code, str(src), str(dst)], env=env, cwd=d, check=True, timeout=600)
            outs.append(np.load(dst))
    diff = np.abs(outs[0] - outs[1]).max(1)
    return {"steps": int(len(diff)), "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "p99_abs_diff": float(np.quantile(diff, 0.99))}


def render(report: dict) -> str:
    lines = ["# The one-sampler engine against the engine of the Ant-v5 4181 run, on one trajectory", "",
             f"Run {report['machine']['timestamp_utc']} on {report['machine']['cpu_model']}, "
             f"{report['machine']['cpu_count']} CPUs. Command: `{report['command']}`. Old engine: commit "
             f"`{report['old_commit']}`. See the script's docstring for the set-up.", ""]
    if "batches" in report:  # sections 1-4 (section 5 may run alone: --only-pendulum)
        lines += _sections_1_to_4(report)
    pend = report.get("pendulum")
    if pend:
        lines += _section_5(pend)
    return "\n".join(lines) + "\n"


def _sections_1_to_4(report: dict) -> list[str]:
    lines = ["## 1. Sampler, GAE, reward scaling (observation normalization off: one trajectory)", "",
             f"Episode lengths (both engines): {report['episode_lengths']['new']}", "",
             "Rollout 1 acts with the shared initial weights; rollouts 2 and 3 with each engine's own learner "
             "update of them (section 2), equal up to float rounding, whose differences then grow.", "",
             "| batch field | rollout | rows | max abs diff | mean abs diff | rows differing > 1e-3 |",
             "|---|---:|---:|---:|---:|---:|"]
    for f, parts in report["batches"].items():
        for r in parts:
            lines.append(f"| {f} | {r['rollout']} | {r['rows']} | {r['max_abs_diff']:.3g} | {r['mean_abs_diff']:.3g} | "
                         f"{r['rows_over_1e-3']} |")
    lines += ["", "## 2. Learner: three updates from the same weights on those rollouts", "",
              "| update | " + " | ".join(f"{k.split('/')[1]} old / new" for k in LOSSES) + " |",
              "|---|" + "---:|" * len(LOSSES)]
    for i, (o, n) in enumerate(zip(report["losses"]["old"], report["losses"]["new"])):
        lines.append(f"| {i + 1} | " + " | ".join(f"{o.get(k, float('nan')):.5f} / {n.get(k, float('nan')):.5f}"
                                                  for k in LOSSES) + " |")
    z = report["normalizer"]
    lines += ["", "## 3. Observation normalizer on one raw stream", "",
              f"{z['steps']:,} observations: normalized values differ by {z['mean_abs_diff']:.3g} on average, "
              f"{z['p99_abs_diff']:.3g} at the 99th percentile, {z['max_abs_diff']:.3g} at most (the new normalizer "
              "recomputes its mean and std when the unused samples would move them by 1/256 of their weight, the old "
              "one every step; their statistics agree).", ""]
    rep = report.get("training")
    if rep:
        ref = rep["arms"][0]["updates"]
        lines += ["## 4. The whole training loop (`hdppo train`), sampled actions", "",
                  "Every policy draws its noise from its worker's own stream, so equal engines sample equal actions. "
                  "Per update: episodes ended / mean return / approx KL / value loss; last column: the largest relative "
                  "difference of any logged metric from the first arm at update 1.", "",
                  "| arm | " + " | ".join(f"update {k + 1}" for k in range(len(ref))) + " | update 1 vs first arm |",
                  "|---|" + "---|" * len(ref) + "---:|"]
        for arm in rep["arms"]:
            ups = arm["updates"]
            cells = [f"{u['charts/episodes']:.0f} / {u['charts/episodic_return']:.2f} / {u['losses/approx_kl']:.5f} / "
                     f"{u['losses/value']:.4f}" for u in ups]
            rel = max(abs(ups[0][t] - ref[0][t]) / max(abs(ref[0][t]), 1e-12) for t in REPLAY_TAGS)
            lines.append(f"| {arm['arm']} | " + " | ".join(cells) + f" | {rel:.2g} |")
        lines.append("")
    return lines


def _section_5(pend: dict) -> list[str]:
    ref = pend["arms"][0]["updates"]
    shown = [k for k in (1, 2, 3, 4, 5, 10, 20, 30, 50, 100) if k <= len(ref)]
    lines = ["## 5. The whole training loop on Pendulum-v1, over many updates", "",
              f"Section 4's harness on `{pend['env']['id']}` with `configs/ant.yaml`'s PPO settings, "
              f"{pend['updates']} updates, local backend. Pendulum's episodes end by truncation only "
              "(200 steps), so every update bootstraps from final observations and from the rollout's cut, "
              "publishes normalizer statistics and carries the reward scaler over. Each cell: the largest "
              "relative difference from the old engine at that update of the mean episode return, the value "
              "loss and the entropy (KL and clip fraction, small and jumping on single clip decisions, left "
              "out; the json has them); then the largest difference in the KL at any of the first three "
              "updates, and the entropy at the last update (old engine: "
              f"{ref[-1]['losses/entropy']:.4f}).", "",
              "| arm | " + " | ".join(f"update {k}" for k in shown) + " | KL, updates 1-3 | entropy, last update |",
              "|---|" + "---:|" * (len(shown) + 2)]
    for arm in pend["arms"][1:]:
        d = divergence(ref, arm["updates"])
        kl = max(divergence(ref[:3], arm["updates"][:3], ("losses/approx_kl",)))
        lines.append(f"| {arm['arm']} | " + " | ".join(f"{d[k - 1]:.1g}" for k in shown)
                     + f" | {kl:.1g} | {arm['updates'][-1]['losses/entropy']:.4f} |")
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-commit", default=OLD_COMMIT)
    ap.add_argument("--out", default=str(HERE / "results" / "engine_equivalence"))
    ap.add_argument("--updates", type=int, default=3, help="updates of section 4's training runs (0: skip it)")
    ap.add_argument("--pendulum-updates", type=int, default=30, help="updates of section 5's runs (0: skip it)")
    ap.add_argument("--only-pendulum", action="store_true",
                    help="section 5 alone, written to <out>_pendulum.{json,md} (the other sections' file is kept)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hdppo_equiv_") as tmp_s, old_tree(args.old_commit) as root:
        tmp = Path(tmp_s)
        if args.only_pendulum:
            report = {"machine": machine_info(), "command": command_line(argv), "old_commit": args.old_commit,
                      "pendulum": training_replay(tmp, root, args.pendulum_updates, {"id": "Pendulum-v1"},
                                                  PENDULUM_ARMS)}
            md = render(report)
            save_files(Path(args.out + "_pendulum"), report, md)
            print(md)
            return 0
        new, info_new = run_engine(tmp, "new", False, None)
        old, info_old = run_engine(tmp, "old", False, root)
        if not info_old["files"].startswith(str(root)):
            raise RuntimeError(f"the old engine imported {info_old['files']}, not the tree of {args.old_commit}")
        report = {"machine": machine_info(), "command": command_line(argv), "old_commit": args.old_commit,
                  "batches": compare(old, new),
                  "losses": {"old": info_old["losses"], "new": info_new["losses"]},
                  "episode_lengths": {"old": info_old["episode_lengths"], "new": info_new["episode_lengths"]},
                  "normalizer": normalizer_stream(root, new["obs"])}
        if args.updates:
            report["training"] = training_replay(tmp, root, args.updates)
        if args.pendulum_updates:
            report["pendulum"] = training_replay(tmp, root, args.pendulum_updates, {"id": "Pendulum-v1"}, PENDULUM_ARMS)
    md = render(report)
    save_files(Path(args.out), report, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
