"""Each bundled example is an installable package whose `hyphae.extensions` entry point names
its extension, with its own tests; the four load together."""

from __future__ import annotations

import tomllib

import pytest

from extensions_host import registry
from extensions_host.sdk import Extension

from .conftest import EXAMPLE_NAMES, EXAMPLES


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_example_is_a_package_whose_entry_point_names_its_extension(name, examples_importable):
    folder = EXAMPLES / name
    project = tomllib.loads((folder / "pyproject.toml").read_text())

    entry_points = project["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
    assert list(entry_points) == [name]
    definition = registry.resolve(entry_points[name])
    assert isinstance(definition, Extension)
    assert definition.id == name
    assert definition.version == project["project"]["version"]
    (package,) = project["tool"]["setuptools"]["packages"]
    assert (folder / package / "__init__.py").is_file()
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert list((folder / "tests").glob("test_*.py")), "each example ships its own tests"


def test_the_four_examples_load_together(examples_importable):
    definitions = [registry.resolve(f"hyphae_{name}.extension:{name}") for name in EXAMPLE_NAMES]

    loaded = registry.load((f"example {d.id}", d) for d in definitions)

    assert sorted(loaded) == sorted(EXAMPLE_NAMES)
