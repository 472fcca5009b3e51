#!/usr/bin/env bash
# Mutation testing of cpubuild's pure modules (a developer command, not CI):
# mutmut mutates runtime/select.py, matrix.py and index/names.py and runs the
# unit tests that cover them against each mutant. It works on a scratch copy
# (MUTATE_DIR, default $TMPDIR/cpubuild-mutate) laid out so that `cpubuild`
# imports as it does for users (mutmut names mutants by import path), and
# prints the score and the surviving mutants. Afterwards, in that folder:
#   mutmut show <mutant>     the diff of one survivor
#   mutmut results           the list again
# Arguments go to `mutmut run` (e.g. a mutant-name glob to rerun a few).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${MUTATE_DIR:-${TMPDIR:-/tmp}/cpubuild-mutate}
command -v mutmut >/dev/null || { echo "mutate.sh: mutmut is not installed (pip install mutmut)" >&2; exit 1; }

# MUTATE_MODULES narrows it, e.g. "cpubuild/index/names.py" (matrix.py alone is ~1400 mutants)
read -r -a modules <<< "${MUTATE_MODULES:-cpubuild/runtime/select.py cpubuild/matrix.py cpubuild/index/names.py}"
tests=(tools/tests/unit/test_select.py tools/tests/unit/test_macos_select.py tools/tests/unit/test_matrix.py
       tools/tests/unit/test_install_levels.py tools/tests/unit/test_wheel_plan.py tools/tests/unit/test_index_names.py
       tools/tests/unit/test_index_pages.py)

rm -rf "$work" && mkdir -p "$work/tests/unit"
cp -r "$repo/tools/cpubuild" "$work/"
mkdir -p "$work/mutants" && ln -s . "$work/mutants/tools"  # the tests' conftest imports REPO/tools: the mutated copy
cp "$repo/isa_matrix.toml" "$work/"
cp "$repo/tests/conftest.py" "$repo/tests/ci_skip_rule.py" "$work/tests/"
for t in "${tests[@]}"; do cp "$repo/$t" "$work/$t"; done
{
  cat "$repo/pyproject.toml"  # the tests read cpukern's [tool.cpubuild] from it
  echo
  echo "[tool.mutmut]"
  echo 'source_paths = ["cpubuild"]'
  printf 'only_mutate = [%s]\n' "$(printf '"%s", ' "${modules[@]}" | sed 's/, $//')"
  echo 'also_copy = ["tests", "isa_matrix.toml"]'
  printf 'pytest_add_cli_args_test_selection = [%s]\n' "$(printf '"%s", ' "${tests[@]}" | sed 's/, $//')"
  echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-o", "addopts="]'
} > "$work/pyproject.toml"

cd "$work"
nice -n 10 mutmut run --max-children "${MUTATE_JOBS:-2}" "$@" || true
mutmut results --all true > results.txt 2>&1 || mutmut results > results.txt 2>&1 || true
killed=$(grep -c ': killed$' results.txt || true)
total=$(grep -c ': ' results.txt || true)
echo "mutate.sh: $killed of $total mutants killed; not killed:"
grep -v ': killed$' results.txt || true
