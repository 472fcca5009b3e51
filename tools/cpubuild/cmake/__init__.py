"""cpubuild's CMake package: ``find_package(cpubuild CONFIG)`` then ``cpubuild_add_variants(...)``.

scikit-build-core finds it through the ``cmake.prefix`` entry point of the
cpubuild distribution (any build with cpubuild in ``build-system.requires``);
other CMake builds pass ``-Dcpubuild_DIR=$(cpubuild --cmake-dir)``.
"""

from pathlib import Path

CMAKE_DIR = Path(__file__).resolve().parent
TOOLCHAINS = CMAKE_DIR / "toolchains"
