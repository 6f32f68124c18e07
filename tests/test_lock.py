"""requirements/test.lock, what `make test` installs, is current: every requirement of the
package and of its test and bench extras is pinned there to a version that satisfies it (a
requirement added to pyproject.toml without `make lock` fails here, not on a fresh machine)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "requirements" / "test.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#", "-")):
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = Version(version.strip())
    return out


def requirements(project: dict, extras: list[str]) -> list[Requirement]:
    """The project's requirements with these extras, its own extras (decoderkit[x]) expanded."""
    found, todo = list(map(Requirement, project["dependencies"])), list(extras)
    while todo:
        for spec in project["optional-dependencies"][todo.pop()]:
            req = Requirement(spec)
            if canonicalize_name(req.name) == project["name"]:
                todo.extend(req.extras)
            else:
                found.append(req)
    return found


def test_the_lock_pins_every_requirement_of_the_test_and_bench_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins()
    assert str(pinned["torch"]).endswith("+cpu"), "the lock must pin the local CPU wheel"
    assert not [n for n in pinned if n.startswith("nvidia")]
    for req in requirements(project, ["test", "bench"]):
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req} is not in requirements/test.lock: run make lock"
        assert req.specifier.contains(pinned[name], prereleases=True), \
            f"requirements/test.lock pins {name}=={pinned[name]}, outside {req}: run make lock"
