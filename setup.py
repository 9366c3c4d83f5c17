"""Which modules the package holds, found in its folders rather than listed by hand (everything
else is in pyproject.toml): each folder of FOLDERS installs as `situate.<folder>`, with every
package under it, so a new subpackage can never be left out of a wheel (tests/test_wheel.py
builds one and compares it with the folders)."""

from setuptools import find_packages, setup

# The folders at the top of the repository that make up `situate.*`.
FOLDERS = ("core", "storage", "tasks", "pipeline", "flows", "cli", "api", "integrations", "testing")


def packages() -> list[str]:
    return [f"situate.{name}" for folder in FOLDERS
            for name in (folder, *(f"{folder}.{sub}" for sub in find_packages(folder)))]


setup(packages=packages(), package_dir={f"situate.{folder}": folder for folder in FOLDERS})
