"""The repository layout keeps the standard library's ``platform`` importable, and the env and
policy packages free of the runtime."""
import ast
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


def _imported_modules(path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def test_envs_and_policies_do_not_import_the_runtime():
    bad = []
    for folder in ("envs", "policies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = ["hdppo", *rel.parts]
            package = ".".join(parts[:-1])  # a module's package; an __init__'s is its own folder
            bad += [f"{path.relative_to(ROOT)}:{line}: {mod}" for line, mod in _imported_modules(path, package)
                    if mod == "hdppo.platform" or mod.startswith("hdppo.platform.")]
    assert not bad, "envs/ and policies/ must not import the runtime (hdppo.platform):\n" + "\n".join(bad)


def test_imports_between_the_packages_are_relative_and_resolve_to_files():
    """Go-to-definition and a static import graph follow a relative import by the file system
    (the four packages are sibling folders, as hdppo's subpackages are); an absolute
    ``hdppo.x`` import needs the installed package mapping to resolve."""
    absolute, unresolved = [], []
    for folder in ("platform", "envs", "policies", "hierarchies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("hdppo"):
                    absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module}")
                elif isinstance(node, ast.ImportFrom) and node.level:
                    base = path.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    target = base.joinpath(*(node.module or "").split("."))
                    if not (target.with_suffix(".py").is_file() or target.is_dir()):
                        unresolved.append(f"{path.relative_to(ROOT)}:{node.lineno}: {'.' * node.level}{node.module}")
    assert not absolute, "use relative imports inside the package:\n" + "\n".join(absolute)
    assert not unresolved, "relative imports that point at no file:\n" + "\n".join(unresolved)
