"""A project's release pipeline (ci/release.yml, a GitHub Actions workflow),
rendered from its matrix and the emulated CPU models each arch's wheel is
tested under: cases.py (ci/emulation.toml, or derived from the hardware data),
groups.py ([tool.cpubuild.ci] variant-groups: the build fan-out, checked against the matrix),
render.py (the workflow as data, checked), yamlout.py (block YAML),
files.py (ci/ compared, written, linted). `cpubuild ci` parses, calls and prints.
"""
