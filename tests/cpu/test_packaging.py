"""The wheel is complete: installed outside the source tree, scangen imports and renders.

A source checkout finds its templates at the top level of the repository; an installed
wheel must carry them inside the package. This builds the wheel, installs it into a fresh
virtual environment and renders a kernel from a directory far from the checkout.
"""
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[2]
#: Not copied into the build tree: VCS data, local environments, build leftovers.
_IGNORED = shutil.ignore_patterns(".git", ".ci-venv", ".venv", "build", "dist", "*.egg-info",
                                  "__pycache__", ".pytest_cache", ".gpu", ".whl", ".gl",
                                  "bench-results")


def _can_build_wheels():
    major, minor = (int(part) for part in setuptools.__version__.split(".")[:2])
    # setuptools < 70.1 builds wheels through the separate `wheel` package.
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not _can_build_wheels():
        pytest.skip(f"setuptools {setuptools.__version__} needs the 'wheel' package to build "
                    "wheels: pip install -e '.[test]'")
    # Build from a copy, so stale files in the checkout's build/ cannot leak into the wheel
    # and the checkout is left as it was.
    source = tmp_path_factory.mktemp("src") / "scangen"
    shutil.copytree(ROOT, source, ignore=_IGNORED)
    out = tmp_path_factory.mktemp("wheelhouse")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(out)],
        cwd=source, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(out.glob("scangen-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_templates_and_cli(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted((ROOT / "templates").rglob("*.j2"))
    assert templates
    for path in templates:
        inside = "scangen/templates/" + path.relative_to(ROOT / "templates").as_posix()
        assert inside in names, f"{inside} missing from {wheel.name}"
    for module in ("__init__", "__main__", "cli", "render", "scan"):
        assert f"scangen/{module}.py" in names
    # the CUB peers bench --cub builds, with the header they include
    peers = sorted((ROOT / "scangen" / "cub").iterdir())
    assert {p.suffix for p in peers} == {".cu", ".cuh"}
    for path in peers:
        assert f"scangen/cub/{path.name}" in names, f"{path.name} missing from {wheel.name}"
    assert not any(name.startswith(("tests/", "examples/")) for name in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "scangen = scangen.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def _runner_site_dirs():
    """Where this interpreter finds jinja2 and numpy; the new venv gets them through a .pth."""
    dirs = list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def test_installed_wheel_imports_and_renders_outside_the_tree(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    # --system-site-packages gives the base interpreter's packages; when the tests run inside
    # a venv (as .ci/run does), its packages come from the .pth written below instead.
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=os.name != "nt") \
        .create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "_scangen_test_runner_site.pth").write_text(
        "\n".join(_runner_site_dirs()) + "\n")

    clean_env = {k: v for k, v in os.environ.items()
                 if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    # pip itself comes from the runner's packages; run by the venv's python, it installs there.
    install = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, env=clean_env, cwd=tmp_path, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr

    work = tmp_path / "elsewhere"
    work.mkdir()
    script = textwrap.dedent("""
        import sys, numpy as np, scangen
        from scangen.render import TEMPLATE_DIRS
        print(scangen.__file__)
        print(TEMPLATE_DIRS)
        source = scangen.Scan(np.int32, "add", mode="exclusive", algorithm="brent_kung").source
        assert "__global__" in source, source[:500]
        op = scangen.Operator("b != 0 ? b : a", identity=0, name="last_nonzero")
        assert "b != 0 ? b : a" in scangen.Scan(np.float64, op).source
        from scangen.cli import main
        sys.exit(main(["plan", "--n", "5000"]))
    """)
    run = subprocess.run([python, "-c", script], capture_output=True, text=True,
                         env=clean_env, cwd=work, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    module_file, template_dirs = run.stdout.splitlines()[:2]
    assert Path(module_file).resolve().is_relative_to(env_dir.resolve()), module_file
    assert str(ROOT) not in template_dirs, template_dirs
    assert "plan: inclusive scan with add over n=5000" in run.stdout
