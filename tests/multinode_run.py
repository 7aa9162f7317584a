"""Run by tests/test_multinode.py in its own process: a two-node Ray cluster on this machine
(ray.cluster_utils.Cluster), a short training joined with an address, and where workers ran."""
import json
import sys
import tempfile

import ray
from ray.cluster_utils import Cluster

from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
cluster.add_node(num_cpus=2)
cluster.wait_for_nodes()
cfg = validate({
    "name": "multinode", "env": {"id": "CartPole-v1"},
    "layers": [{"ppo": {"minibatch_size": 128, "num_epochs": 2},
                "dppo": {"num_workers": 3, "num_envs_per_worker": 2, "train_batch_size": 768, "worker_cpus": 1.0}}],
    "train": {"total_env_steps": 3000, "checkpoint_every": 100, "eval_episodes": 1},
    "ray": {"address": cluster.address}})
with tempfile.TemporaryDirectory() as tmp:
    trainer = Trainer(cfg, f"{tmp}/run", quiet=True)
    try:
        summary = trainer.train()
        nodes = ray.get([w.node.remote() for w in trainer.groups[0].workers])
        num_workers = trainer.groups[0].num_workers
    finally:
        trainer.shutdown()
ray.shutdown()
cluster.shutdown()
json.dump({"nodes": nodes, "cluster_nodes": 2, "env_steps": summary["env_steps"], "workers": num_workers}, sys.stdout)
