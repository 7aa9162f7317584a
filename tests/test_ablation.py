import json

import pytest

from conftest import tiny_config
from hdppo.platform.ablation import ablate, parse_counts
from hdppo.platform.errors import ConfigError


def test_ablate_trains_each_worker_count_and_writes_table_and_plot(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(tiny_config()))
    rows = ablate(str(cfg), [1, 2], tmp_path / "out")
    assert [r["workers"] for r in rows] == [1, 2] and [r["workers_used"] for r in rows] == [[1], [2]]
    assert all(r["env_steps"] >= 512 and r["env_steps_per_s"] > 0 for r in rows)
    for name in ("ablation.json", "ablation.md", "ablation.png"):
        assert (tmp_path / "out" / name).is_file()
    table = (tmp_path / "out" / "ablation.md").read_text()
    assert "| 2 |" in table
    # Rounded for reading: no float artefacts such as 0.9700000000000001.
    assert all("." not in cell or len(cell.strip().rpartition(".")[2]) <= 2 for line in table.splitlines()[2:]
               for cell in line.strip("|").split("|")), table


@pytest.mark.parametrize("text", ["", "1,x", "0,2"])
def test_bad_worker_lists_are_refused(text):
    with pytest.raises(ConfigError, match="positive worker counts"):
        parse_counts(text)


def test_an_out_path_that_is_a_file_is_refused_before_training(tmp_path):
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"--out .*afile.txt: is a file, not a folder"):
        ablate(str(tmp_path / "missing.yaml"), [1], afile)
    with pytest.raises(ConfigError, match=r"--out .*sub: the folder cannot be created \(.*afile.txt is a file\)"):
        ablate(str(tmp_path / "missing.yaml"), [1], afile / "sub")
