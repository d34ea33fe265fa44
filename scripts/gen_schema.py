"""Write docs/schema/*.json, the JSON Schema of what the tool says, from the Structs of
``tb_kineto_insights/schema`` (``msgspec.json.schema``): ``summary.schema.json`` (one
span), ``run_view.schema.json`` (the view across ranks), ``diff.schema.json``
(``tb_kineto_insights.diff/1``) and ``report.schema.json``
(``tb_kineto_insights.report/1``).

    python scripts/gen_schema.py           write them (``make schema``)
    python scripts/gen_schema.py --check   exit 1 naming the files that are not current

``frontend/gen_types.mjs`` generates ``frontend/src/types.ts`` from these files;
``tests/test_schema.py`` checks that both are current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tb_kineto_insights.schema import json_schemas

DOCS_SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "schema"


def rendered() -> dict[str, str]:
    """``{file name: text}``: indented JSON with a final newline, keys in msgspec's order
    (deterministic: the same Structs give the same bytes)."""
    return {
        name: json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        for name, schema in json_schemas().items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    parser.add_argument("--out", type=Path, default=DOCS_SCHEMA, help="folder to write")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"not current (run `make schema`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
