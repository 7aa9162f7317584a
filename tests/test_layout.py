"""The repository layout keeps the standard library's ``platform`` importable."""
import subprocess
import sys

from conftest import ROOT


def test_stdlib_platform_not_shadowed_from_repo_root():
    code = "import platform, torch, ray, hdppo.platform; assert callable(platform.system); print(platform.system())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


def test_platform_folder_is_a_namespace():
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_public_packages_declare_their_api():
    import hdppo.envs
    import hdppo.policies

    for mod in (hdppo.envs, hdppo.policies):
        for name in mod.__all__:
            assert hasattr(mod, name)
