"""`python -m cpubuild.settings --schema | --docs [REPO]`: prints the JSON schema,
or rewrites the generated option tables of REPO's docs/ (default: the working directory)."""

from __future__ import annotations

import sys
from pathlib import Path

from .generate import DOC_TABLES, render_docs, schema_text


def main(argv: list[str]) -> int:
    if argv[:1] == ["--schema"]:
        sys.stdout.write(schema_text())
        return 0
    if argv[:1] == ["--docs"]:
        repo = Path(argv[1]) if len(argv) > 1 else Path.cwd()
        for doc, names in DOC_TABLES.items():
            path = repo / doc
            path.write_text(render_docs(path.read_text(encoding="utf-8"), names), encoding="utf-8")
            print(f"wrote {path}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
