"""The Makefile's two set-up paths, read from `make -n` (nothing runs): with TORCH_WHEELS a
folder, PyTorch's CPU wheel comes from it; without one (a laptop, a cloud VM), from the torch
page of PyTorch's CPU wheel index. Both install exactly requirements/test.lock, check that the
torch they got is CPU-only, and `make lock` pins the same CPU wheel from either source."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = "https://download.pytorch.org/whl/cpu/torch/"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, torch_wheels: str, tmp_path: Path) -> list[str]:
    """The command lines `make -n -B TARGET` prints for this TORCH_WHEELS, the venv under
    tmp_path (so whatever .venv this checkout has does not change what is printed)."""
    out = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}",
         f"TORCH_WHEELS={torch_wheels}"],
        capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.splitlines()


def only(lines: list[str], word: str) -> str:
    """The one command line that holds `word`."""
    found = [line for line in lines if word in line]
    assert len(found) == 1, f"{len(found)} lines hold {word!r}: {found}"
    return found[0]


def find_links(line: str) -> list[str]:
    return re.findall(r"--find-links (\S+)", line)


def install(tmp_path: Path, torch_wheels: str) -> str:
    """The `uv pip sync` line of the set-up, after checking the lines around it: the editable
    install, `uv pip check` and the CPU-only check."""
    lines = dry_run(f"{tmp_path / 'venv'}/.installed", torch_wheels, tmp_path)
    sync = only(lines, "pip sync")
    assert sync.split()[-1] == "requirements/test.lock"
    assert "--index-url" not in sync and "--extra-index-url" not in sync
    cpu_check = only(lines, "torch.version.cuda is None")
    assert '"nvidia", "triton"' in cpu_check
    assert lines.index(sync) < lines.index(only(lines, "pip check")) < lines.index(cpu_check)
    return sync


def test_a_torch_wheels_folder_is_the_only_source_of_torch(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert find_links(install(tmp_path, str(wheels))) == [str(wheels)]


@pytest.mark.parametrize("where", ["missing", ""])
def test_without_the_folder_torch_comes_from_pytorchs_cpu_index(tmp_path, where):
    torch_wheels = str(tmp_path / where) if where else ""
    assert find_links(install(tmp_path, torch_wheels)) == [INDEX]


@pytest.mark.parametrize("folder", [True, False])
def test_make_lock_pins_the_cpu_wheel_from_either_source(tmp_path, folder):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    line = only(dry_run("lock", str(wheels if folder else tmp_path / "missing"), tmp_path),
                "pip compile")
    assert find_links(line) == [str(wheels) if folder else INDEX]
    assert "--override requirements/torch-cpu.txt" in line
    assert "--index-url" not in line and "--extra-index-url" not in line
    pin = [r for r in (ROOT / "requirements" / "torch-cpu.txt").read_text().splitlines()
           if r and not r.startswith("#")]
    assert len(pin) == 1 and re.fullmatch(r"torch==[\d.]+\+cpu", pin[0]), pin
    assert pin[0] in (ROOT / "requirements" / "test.lock").read_text().splitlines()
