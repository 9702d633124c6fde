"""Package list for setuptools (everything else is in pyproject.toml).

The repository keeps ``backends/`` and ``adbench/`` at the top level, but an install puts
them inside accel's own package (``accel.backends``, ``accel.adbench``) so that nothing but
``accel`` lands at the top level of site-packages (``backends`` and ``adbench`` are other
projects' names on the package index).
"""
from setuptools import find_packages, setup

MAPPED = {"backends": "accel.backends", "adbench": "accel.adbench"}

packages = find_packages(include=["accel", "accel.*"])
for folder, name in MAPPED.items():
    packages += [name + sub[len(folder):]
                 for sub in find_packages(include=[folder, folder + ".*"])]

setup(
    packages=packages,
    package_dir={name: folder for folder, name in MAPPED.items()},
    package_data={"accel.adbench": ["data/**/*"]},
)
