"""The docs site's build-time parts (mkdocs_hooks.py): includes and generated reference tables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import mkdocs_hooks as hooks  # noqa: E402  (a top-level file mkdocs loads, not a package)

SOURCE = """# Title

Intro with a [link](docs/page.md) and one [from a folder](../docs/other.md#part).

## Keep

Kept.

```sh
# not a heading
```

### Keep too

More.

## Drop

Dropped.

### Drop too

Gone.

## Last

End.
"""


@pytest.fixture
def source(tmp_path: Path) -> str:
    path = tmp_path / "README.md"
    path.write_text(SOURCE, encoding="utf-8")
    return str(path)


def test_an_include_moves_headings_and_links_and_leaves_out_the_excluded_section(source: str) -> None:
    text = hooks.include(source, None, 2, "Drop")
    assert "Dropped" not in text and "Gone" not in text and "End." in text
    assert text.startswith("## Title") and "\n### Keep\n" in text and "\n#### Keep too\n" in text
    assert "# not a heading" in text  # fenced code is not a heading
    assert "[link](page.md)" in text and "[from a folder](other.md#part)" in text


def test_a_section_include_ends_at_the_next_heading_of_its_level(source: str) -> None:
    text = hooks.include(source, "Keep", 1, None)
    assert text.startswith("# Keep") and "## Keep too" in text and "Dropped" not in text


def test_an_unknown_section_fails_the_build(source: str) -> None:
    with pytest.raises(KeyError, match="Nowhere"):
        hooks.include(source, "Nowhere", 2, None)


def test_the_settings_table_has_a_row_per_variable_with_its_context_key() -> None:
    from punctual.runtime.settings import DEPLOYED, Settings, context_key

    rows = hooks.settings_table().splitlines()[2:]
    assert len(rows) == len(Settings.model_fields)
    by_variable = {row.split(" | ")[0].strip("| `"): row for row in rows}
    for name in Settings.model_fields:
        row = by_variable[Settings.variable(name)]
        assert (f"`{context_key(name)}`" in row) == (name in DEPLOYED), name
    assert "at most this long after the death" in by_variable["PUNCTUAL_MESSAGE_LEASE_S"]  # its comment


def test_the_events_table_lists_every_field_of_the_schema_escaped() -> None:
    import json

    schema = json.loads((ROOT / "docs" / "events.schema.json").read_text(encoding="utf-8"))
    table = hooks.schema_table("docs/events.schema.json")
    for field in schema["properties"]:
        assert f"| `{field}` |" in table, field
    assert "&lt;tenant&gt;" in table and "<tenant>" not in table  # text, not an HTML tag
