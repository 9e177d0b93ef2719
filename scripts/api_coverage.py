"""How much of each Google API the emulator covers, measured against the discovery documents.

Per API: the methods gcptui calls (seen from its clients while the tests run), the methods gcloud
calls (the conformance tests), the methods the emulator serves (read from its router), and for each
served method the fields of its response schema the emulator never set in any answer the tests saw.

Usage:
  python scripts/api_coverage.py                      # runs the default tests (-n 0) while recording
  python scripts/api_coverage.py --tests tests/gce    # other tests
  python scripts/api_coverage.py --record DIR         # read what an earlier run recorded
                                                      # (GCPTUI_API_RECORD=DIR pytest ...)
  python scripts/api_coverage.py --write              # also update docs/EMULATOR.md's numbers
Needs the dev dependencies (google-api-python-client). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gcptui.remote.emulator import Emulator  # noqa: E402
from tests.schema.apis import apis  # noqa: E402
from tests.schema.checker import match  # noqa: E402
from tests.schema.fields import schema_paths  # noqa: E402
from tests.schema.middleware import RECORD  # noqa: E402

DEFAULT_TESTS = ["tests/gce", "tests/cli", "tests/emulator", "tests/tpu", "tests/vertex"]
DOC = ROOT / "docs" / "EMULATOR.md"
BEGIN, END = "<!-- api_coverage begin -->", "<!-- api_coverage end -->"


async def served_methods() -> dict[str, str]:
    """Method id -> "VERB path" for every route the emulator's server has."""
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as root:
        async with Emulator(Path(root), ssh=False) as emu:
            assert emu.server is not None
            for route in emu.server.app.router.routes():
                if route.method == "HEAD":
                    continue
                template = route.resource.canonical if route.resource else ""
                sample = re.sub(r"\{[^}]+\}", "x1", template)
                found = match(route.method, sample)
                if found is None:
                    out[f"(undocumented) {route.method} {template}"] = template
                elif found[1] is not None:
                    out[found[1].id] = f"{route.method} {template}"
    return out


def read_records(folder: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for file in sorted(folder.glob("*.jsonl")):
        lines += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return lines


def record(tests: list[str], folder: Path) -> None:
    env = {**os.environ, RECORD: str(folder)}
    command = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", *tests]
    subprocess.run(command, cwd=ROOT, env=env, check=False)


def report(served: dict[str, str], records: list[dict[str, Any]]) -> dict[str, Any]:
    by_api: dict[str, Any] = {}
    product: dict[str, set[str]] = defaultdict(set)
    gcloud: dict[str, set[str]] = defaultdict(set)
    seen_fields: dict[str, set[str]] = defaultdict(set)
    for line in records:
        method = line.get("method")
        if not method:
            continue
        (gcloud if line.get("gcloud") else product)[method.split(".", 1)[0]].add(method)
        seen_fields[method].update(line.get("fields", []))
    for api in apis():
        name = api.name
        documented = {m.id: m for m in api.methods}
        mine = sorted(m for m in served if m in documented)
        unset: dict[str, list[str]] = {}
        for method_id in mine:
            method = documented[method_id]
            if method.response:
                every = schema_paths(api.schema, {"$ref": method.response})
                seen = seen_fields.get(method_id, set())
                # Only fields whose parent was set: a resource's unset fields, not every nested leaf.
                unset[method_id] = sorted(
                    p for p in every if p not in seen and (_parent(p) == "" or _parent(p) in seen)
                )
        by_api[name] = {
            "document": api.file,
            "documented_methods": len(documented),
            "served": mine,
            "called_by_gcptui": sorted(product.get(name, set())),
            "called_by_gcloud": sorted(gcloud.get(name, set())),
            "called_not_served": sorted((product.get(name, set()) | gcloud.get(name, set())) - set(mine)),
            "served_not_exercised": sorted(set(mine) - product.get(name, set()) - gcloud.get(name, set())),
            "unset_fields": unset,
        }
    undocumented = sorted(m for m in served if m.startswith("(undocumented)"))
    return {"apis": by_api, "undocumented_routes": undocumented, "exchanges": len(records)}


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("[]"), path.rfind("{}"))
    parent = path[:cut] if cut > 0 else ""
    return parent.removesuffix("[]").removesuffix("{}") if parent.endswith(("[]", "{}")) else parent


def markdown(result: dict[str, Any]) -> str:
    rows = [
        "| API (document) | methods in the document | served by the emulator | called by gcptui | called by gcloud (conformance tests) | called but not served |",
        "|---|---|---|---|---|---|",
    ]
    for name, api in result["apis"].items():
        rows.append(
            f"| {name} (`{api['document']}`) | {api['documented_methods']} | {len(api['served'])} | "
            f"{len(api['called_by_gcptui'])} | {len(api['called_by_gcloud'])} | {len(api['called_not_served'])} |"
        )
    rows += ["", "Served methods, and the response fields the emulator never set in the answers the tests saw "
             "(fields under an unset parent are not counted):", "",
             "| method | unset fields | of them |", "|---|---|---|"]  # fmt: skip
    for api in result["apis"].values():
        for method, unset in api["unset_fields"].items():
            shown = ", ".join(f"`{p}`" for p in unset[:12]) + (" ..." if len(unset) > 12 else "")
            rows.append(f"| `{method}` | {len(unset)} | {shown} |")
    if result["undocumented_routes"]:
        rows += ["", "Routes no document has: " + ", ".join(result["undocumented_routes"])]
    rows += ["", f"Measured over {result['exchanges']} exchanges (`python scripts/api_coverage.py`)."]
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="*", default=DEFAULT_TESTS)
    parser.add_argument("--record", type=Path, help="read an earlier run's records instead of running tests")
    parser.add_argument("--write", action="store_true", help="update docs/EMULATOR.md")
    args = parser.parse_args(argv)
    served = asyncio.run(served_methods())
    if args.record:
        records = read_records(args.record)
    else:
        with tempfile.TemporaryDirectory(prefix="api-coverage-") as folder:
            record(args.tests, Path(folder))
            records = read_records(Path(folder))
    result = report(served, records)
    text = markdown(result)
    print(text)
    if args.write:
        doc = DOC.read_text()
        start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])
    print(json.dumps({name: {k: len(v) if isinstance(v, list | dict) else v for k, v in api.items()}
                      for name, api in result["apis"].items()}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
