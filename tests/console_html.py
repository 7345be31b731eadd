"""Reading the console's HTML back in tests: tables as rows of cell texts, and the actions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any


@dataclass
class Cell:
    tag: str
    text: str = ""
    attrs: dict[str, str] = field(default_factory=dict)
    items: list[dict[str, str]] = field(default_factory=list)  # <li> of a run strip: attrs + text


@dataclass
class Table:
    id: str
    caption: str = ""
    head: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)
    row_attrs: list[dict[str, str]] = field(default_factory=list)

    def column(self, name: str) -> list[str]:
        index = self.head.index(name)
        return [row[index].text for row in self.rows]


class ConsoleParser(HTMLParser):
    """Collects the tables (by id), the ``<cwdb-action>`` bodies and every link."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, Table] = {}
        self.actions: list[tuple[str, dict[str, str], str]] = []  # (label before, attrs, body)
        self.links: list[tuple[str, str]] = []  # (text, href)
        self._table: Table | None = None
        self._in_head = False
        self._row: list[Cell] | None = None
        self._cell: Cell | None = None
        self._li: dict[str, str] | None = None
        self._caption = False
        self._action: tuple[dict[str, str], list[str]] | None = None
        self._anchor: tuple[str, list[str]] | None = None
        self._last_anchor = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table":
            self._table = Table(found.get("id", f"table-{len(self.tables)}"))
        elif tag == "caption":
            self._caption = True
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._table is not None:
            self._row = []
            if not self._in_head:
                self._table.row_attrs.append(found)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = Cell(tag, attrs=found)
        elif tag == "li" and self._cell is not None:
            self._li = {**found, "text": ""}
        elif tag == "cwdb-action":
            self._action = (found, [])
        elif tag == "a":
            self._anchor = (found.get("href", ""), [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table is not None:
            self.tables[self._table.id] = self._table
            self._table = None
        elif tag == "caption":
            self._caption = False
        elif tag == "thead":
            self._in_head = False
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._in_head:
                self._table.head = [c.text for c in self._row]
            else:
                self._table.rows.append(self._row)
            self._row = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._cell.text = " ".join(self._cell.text.split())
            self._row.append(self._cell)
            self._cell = None
        elif tag == "li" and self._li is not None and self._cell is not None:
            self._cell.items.append(self._li)
            self._li = None
        elif tag == "cwdb-action" and self._action is not None:
            self.actions.append((self._last_anchor, self._action[0], "".join(self._action[1])))
            self._action = None
        elif tag == "a" and self._anchor is not None:
            text = " ".join("".join(self._anchor[1]).split())
            self.links.append((text, self._anchor[0]))
            self._last_anchor = text
            self._anchor = None

    def handle_data(self, data: str) -> None:
        if self._action is not None:
            self._action[1].append(data)
            return
        if self._anchor is not None:
            self._anchor[1].append(data)
        if self._caption and self._table is not None:
            self._table.caption += data
        if self._li is not None:
            self._li["text"] += data
        if self._cell is not None:
            self._cell.text += data + " "


def parse(html: str) -> ConsoleParser:
    parser = ConsoleParser()
    parser.feed(html)
    parser.close()
    return parser


def action_params(html: str, label: str) -> dict[str, Any]:
    """The JSON parameters of the ``<cwdb-action>`` that follows the control labelled ``label``."""
    for before, _, body in parse(html).actions:
        if before == label:
            params: dict[str, Any] = json.loads(body)
            return params
    raise AssertionError(f"no action after {label!r}")


def has_control(html: str, label: str) -> bool:
    return any(text == label for text, _ in parse(html).links)
