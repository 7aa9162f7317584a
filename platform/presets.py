"""The presets: the YAML configs of the repository's ``configs/``, installed as package data of
``hdppo.configs``, so that ``hdppo train default`` works from any folder after ``pip install .``.

A config argument is a file when such a file exists; otherwise a bare name (``default``, or
``default.yaml``) names a preset. Paths written inside a preset (``schedule.checkpoint:
runs/ant_navigate_walk``) stay relative to the folder the command runs in, as ``runs/`` is.
"""
from __future__ import annotations

import difflib

import importlib.util
from pathlib import Path

import yaml

from .errors import ConfigError

__all__ = ["PACKAGE", "preset_paths", "preset_descriptions", "resolve_config_path"]

PACKAGE = "hdppo.configs"
_SUFFIXES = (".yaml", ".yml")


def preset_paths() -> dict[str, Path]:
    """Preset name (the file's stem) -> its file, sorted by name; empty when none is installed."""
    # The folders of the namespace package, not importlib.resources: on Python 3.11 its reader
    # fails on a namespace whose path holds setuptools' editable placeholder entry. pip installs a
    # wheel unzipped, so the folder is on disk in every install.
    spec = importlib.util.find_spec(PACKAGE)
    folders = [Path(p) for p in (spec.submodule_search_locations or []) if Path(p).is_dir()] if spec else []
    found = {f.stem: f for folder in reversed(folders) for f in folder.iterdir() if f.suffix in _SUFFIXES}
    return dict(sorted(found.items()))


def preset_descriptions() -> dict[str, str]:
    """Preset name -> its one-line ``description`` (read as YAML only: listing validates nothing)."""
    out = {}
    for name, path in preset_paths().items():
        data = yaml.safe_load(path.read_text()) or {}
        out[name] = str(data.get("description", "")).strip() if isinstance(data, dict) else ""
    return out


def resolve_config_path(arg: str | Path) -> Path:
    """The config file ``arg`` names: the file itself when it exists, else the preset of that name.

    Raises :class:`ConfigError` naming the presets when it is neither."""
    path = Path(arg)
    if path.is_file():
        return path
    presets = preset_paths()
    looks_like_name = len(path.parts) == 1 and (path.suffix in _SUFFIXES or not path.suffix)
    name = path.stem if looks_like_name else None
    if name in presets:
        return presets[name]
    close = difflib.get_close_matches(name, list(presets), n=1) if looks_like_name and name else []
    # configs/NAME.yaml from outside the repository (the README's commands run from its root): the
    # installed preset of that name is the same file.
    same = path.stem if not looks_like_name and path.parent.name == "configs" and path.stem in presets else None
    missing = (f"{arg} is a folder, not a config file" if path.is_dir() else f"config file {arg} does not exist") + \
        (f", and no preset is named {name!r}" if looks_like_name else "") + \
        (f" (did you mean {close[0]!r}?)" if close else "") + \
        (f" here (the README's commands run from the repository's root); the preset {same!r} is that file, "
         f"installed: `hdppo train {same}`" if same else "")
    listed = (f", or one of the presets: {', '.join(presets)} (`hdppo presets` says what each trains)" if presets else
              "; no presets are installed here (pip install . from the repository installs them)")
    raise ConfigError(f"{missing}. Pass the path to a YAML file, e.g. configs/default.yaml{listed}.")
