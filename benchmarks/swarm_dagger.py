"""Can the swarm drone policy's network fly like the observed-field pilot when it only imitates?

Kickstarted PPO runs (``benchmarks/swarm.py`` with a ``teacher``) kept colliding 10-20% of the
time while the pilot they imitate collides under 1% (until 0845349 removed the teacher term's
log-likelihood floor, which zeroed the gradient of the worst-fitted decisions). This separates
the network from the training: a drone network of the shape of ``configs/swarm_flat.yaml``'s
(MLP [128, 128], tanh, the workers' running observation normaliser) is trained by imitation
alone, on-policy as the learner sees it:
rollouts of 4096 drone decisions acting with its own mean plus Gaussian noise ``--sigma``, each
labelled by ``field_action`` and fitted for 5 epochs in minibatches of 1024 (Adam, lr 5e-4,
gradient norm 0.5), with or without a replay of past labelled decisions (``--replay``, DAgger's
aggregated data; the loss is the fresh minibatch's squared error plus as many replayed rows').
No PPO term, no reward. Then ``--episodes`` deterministic episodes on other seeds; the env with
``crash_on_collision`` as the kickstarted runs had.

Usage:
    python benchmarks/swarm_dagger.py --env-steps 300000,700000 --replay 0,200000

Writes ``benchmarks/results/swarm_dagger.{json,md}`` (``--out`` for another stem).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import save_files  # noqa: E402
from machine import machine_info  # noqa: E402

BATCH, EPOCHS, MINIBATCH, LR, MAX_GRAD_NORM, COPIES = 4096, 5, 1024, 5e-4, 0.5, 32


def _reach_collide(res, out: list) -> None:
    for _, _, ci in res.episodes:
        info = next(i for i in res.infos[ci].values() if "reach_rate" in i)
        out.append((info["reach_rate"], info["collision_rate"]))


def imitate(env_steps: int, replay: int, sigma: float, episodes: int, seed: int, scenario: str) -> dict[str, Any]:
    """Train one network by on-policy imitation for ``env_steps`` (copies x steps) and evaluate it."""
    import torch

    from hdppo.envs.builtin.swarm import make_vector
    from hdppo.envs.builtin.swarm.scripted import field_action
    from hdppo.policies.normalizers import ObservationNormalizer
    from hdppo.policies.teacher_replay import TeacherReplay

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = make_vector(COPIES, seed=seed, scenario=scenario, crash_on_collision=True)
    now = env.reset(seed=seed)
    dim = now.obs.shape[-1]
    net = torch.nn.Sequential(torch.nn.Linear(dim, 128), torch.nn.Tanh(), torch.nn.Linear(128, 128), torch.nn.Tanh(),
                              torch.nn.Linear(128, 3))
    opt = torch.optim.Adam(net.parameters(), LR, eps=1e-5)
    norm = ObservationNormalizer((dim,))  # the workers' normaliser: running statistics, clipped at 10
    ring = TeacherReplay(replay) if replay else None

    def act(xn: np.ndarray, noise: float) -> np.ndarray:
        with torch.no_grad():
            mean = net(torch.from_numpy(xn)).numpy()
        return np.clip(mean + noise * rng.standard_normal(mean.shape), -1.0, 1.0)

    steps, train_eps, t0 = 0, [], time.perf_counter()
    while steps < env_steps:
        seen, normed = [], []
        while sum(len(x) for x in seen) < BATCH:
            x = now.obs[now.acting]
            norm.observe(x)
            xn = norm(x)
            seen.append(x)
            normed.append(xn)
            a = np.zeros(now.obs.shape[:2] + (3,), np.float32)
            a[now.acting] = act(xn, sigma)
            now = env.step(a)
            steps += COPIES
            _reach_collide(now, train_eps)
        xn = np.concatenate(normed)
        y = field_action(np.concatenate(seen), k_neighbors=4).astype(np.float32)
        if ring is not None:
            ring.add(xn, y, np.zeros((len(xn), 0), np.float32))
        for _ in range(EPOCHS):
            for idx in np.array_split(rng.permutation(len(xn)), max(1, round(len(xn) / MINIBATCH))):
                loss = ((net(torch.from_numpy(xn[idx])) - torch.from_numpy(y[idx])) ** 2).mean()
                if ring is not None:
                    rx, ry, _ = ring.sample(len(idx), rng)
                    loss = loss + ((net(torch.from_numpy(rx)) - torch.from_numpy(ry)) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_GRAD_NORM)
                opt.step()
    train_s = time.perf_counter() - t0
    env = make_vector(COPIES, seed=seed + 4242, scenario=scenario, crash_on_collision=True)
    now, ends = env.reset(seed=seed + 4242), []
    while len(ends) < episodes:
        a = np.zeros(now.obs.shape[:2] + (3,), np.float32)
        a[now.acting] = act(norm(now.obs[now.acting]), 0.0)
        now = env.step(a)
        _reach_collide(now, ends)
    e = np.array(ends[:episodes])
    last = np.array(train_eps[-64:]) if train_eps else np.full((1, 2), np.nan)
    return {"env_steps": steps, "replay": replay, "sigma": sigma, "seed": seed, "episodes": episodes,
            "reach_rate": float(e[:, 0].mean()), "collision_rate": float(e[:, 1].mean()),
            "train_reach_rate_last64": float(last[:, 0].mean()), "train_collision_rate_last64": float(last[:, 1].mean()),
            "train_s": train_s}


def render_markdown(report: dict) -> str:
    m = report["machine"]
    lines = ["# swarm: the drone network trained by imitation alone (no PPO term)", "",
             f"Measured {m.get('timestamp_utc', '')} on {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} CPUs. "
             f"Command: `{report['command']}`.", "",
             f"Scenario {report['scenario']}, `crash_on_collision: true`; MLP [128, 128] tanh, rollouts of {BATCH} drone "
             f"decisions with Gaussian noise, {EPOCHS} epochs of minibatches of {MINIBATCH}, Adam lr {LR}; labels from the "
             "observed-field pilot (`field_action`). Deterministic evaluation on other seeds. Targets (issue 11): >= 95% "
             "reached, < 2% collided. The pilot itself: 97.5% / 0.0% (`results/swarm_imitation_full_scripted.md`).", "",
             "| env steps | replay | noise sigma | seed | eval episodes | reached | collided | last 64 training episodes (noisy) | training s |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['env_steps']:,} | {r['replay']:,} | {r['sigma']:g} | {r['seed']} | {r['episodes']} | "
                     f"{r['reach_rate']:.1%} | {r['collision_rate']:.1%} | {r['train_reach_rate_last64']:.1%} / "
                     f"{r['train_collision_rate_last64']:.1%} | {r['train_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-steps", default="300000,700000", help="comma list: training env steps (copies x steps)")
    p.add_argument("--replay", default="0,200000", help="comma list: replay sizes (0: fresh samples only)")
    p.add_argument("--sigma", type=float, default=0.1, help="acting noise while training")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenario", default="8_medium")
    p.add_argument("--out", default=str(HERE / "results" / "swarm_dagger"))
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    for steps in (int(s) for s in args.env_steps.split(",")):
        for replay in (int(r) for r in args.replay.split(",")):
            rows.append(imitate(steps, replay, args.sigma, args.episodes, args.seed, args.scenario))
            print(rows[-1], flush=True)
    report = {"machine": machine_info(), "scenario": args.scenario, "rows": rows,
              "command": "python benchmarks/swarm_dagger.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    save_files(Path(args.out), report, render_markdown(report))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
