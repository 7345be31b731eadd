"""Build-time parts of the documentation site (``mkdocs.yml`` names this file under ``hooks``).

The site's pages are Markdown under ``docs/``; a few of them are partly made here, from the files
they describe, so that they cannot drift from them:

* ``<!-- include: PATH -->`` puts a repository file (or, with ``section="Title"``, one of its
  sections and its subsections) in the page, its headings moved to ``level=N`` and its links to
  ``docs/...`` made relative to the site (``README.md`` is the home page this way, and
  ``infra/README.md`` the deployment and context-settings pages).
* ``<!-- generated: settings -->``: every ``PUNCTUAL_*`` variable of ``punctual.runtime.settings.Settings``
  with its type, default, bounds, CDK context key and the comment the model gives it.
* ``<!-- generated: cli -->``: ``--help`` of the ``punctual`` command and of each of its verbs.
* ``<!-- generated: schema PATH -->``: the fields of a JSON Schema (the events' details).
* ``openapi.json`` (the repository's top) is published beside the pages, so the API page links it.

Nothing here reaches the network: the build works offline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent
MARKER = re.compile(r"<!-- (include|generated): ?(.*?) -->")
ARGUMENT = re.compile(r'(\w+)="([^"]*)"|(\w+)=(\S+)|(\S+)')
HEADING = re.compile(r"^(#{1,6}) (.*)$")
PUBLISHED = ("openapi.json",)


class DocsError(ValueError):
    """A marker the build cannot honour: the build fails naming it."""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Publish the repository files the pages link to but that live outside ``docs/``."""
    for name in PUBLISHED:
        files.append(File.generated(config, name, abs_src_path=str(ROOT / name)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace every marker of a page with what it names."""

    def replace(match: re.Match[str]) -> str:
        kind = match.group(1)
        words: list[str] = []
        options: dict[str, str] = {}
        for found in ARGUMENT.finditer(match.group(2)):
            if found.group(5):
                words.append(found.group(5))
            else:
                options[found.group(1) or found.group(3)] = found.group(2) or found.group(4)
        try:
            if kind == "include":
                return include(
                    words[0], options.get("section"), int(options.get("level", "0")), options.get("exclude")
                )
            return GENERATORS[words[0]](*words[1:])
        except (IndexError, KeyError, OSError) as error:
            raise DocsError(f"{page.file.src_path}: cannot expand {match.group(0)}: {error!r}") from error

    return MARKER.sub(replace, markdown)


# -- includes -------------------------------------------------------------------------------------


def sections(lines: list[str]) -> list[tuple[int, int, str]]:
    """Each heading outside fenced code: (line index, level, title)."""
    found, fence = [], False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        elif not fence and (heading := HEADING.match(line)):
            found.append((index, len(heading.group(1)), heading.group(2)))
    return found


def span(path: str, lines: list[str], title: str) -> tuple[int, int]:
    """Where the section ``title`` of a file begins and ends (its subsections included)."""
    headings = sections(lines)
    matches = [h for h in headings if h[2] == title]
    if len(matches) != 1:
        raise KeyError(f"{path} has {len(matches)} sections titled {title!r}")
    start, top, _ = matches[0]
    return start, next((i for i, lvl, _ in headings if i > start and lvl <= top), len(lines))


def include(path: str, section: str | None, level: int, exclude: str | None) -> str:
    """The text of ``path`` (or of its ``section``, less its section ``exclude``), headings
    moved so the first is at ``level``."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    if exclude is not None:
        start, end = span(path, lines, exclude)
        lines = lines[:start] + lines[end:]
    start, end = span(path, lines, section) if section is not None else (0, len(lines))
    chosen = lines[start:end]
    own = [h for h in sections(lines) if start <= h[0] < end]
    if level and own:
        shift = level - own[0][1]
        for index, old, title in own:
            chosen[index - start] = "#" * max(1, min(6, old + shift)) + " " + title
    return relink("\n".join(chosen))


def relink(text: str) -> str:
    """Links into ``docs/`` written for the repository (from its top, or from a folder beside
    ``docs/`` such as ``infra/``), made relative to the site's pages."""
    return text.replace("](../docs/", "](").replace("](docs/", "](")


# -- generated reference --------------------------------------------------------------------------


def cell(text: object) -> str:
    """Text for a table cell: one line, its pipes and angle brackets escaped (``<tenant>`` is
    text here, not HTML)."""
    escaped = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("|", "\\|").replace("\n", " ")


def setting_comments() -> dict[str, str]:
    """The comment above each field of ``Settings`` (and any on its line), from the source."""
    source = (ROOT / "layers/core/python/punctual/runtime/settings.py").read_text(encoding="utf-8")
    body = source.split("class Settings(BaseModel):", 1)[1]
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if line.startswith("    # "):
            pending.append(stripped[2:])
            continue
        field = re.match(r"^    (\w+): [^=]+=", line)
        if field:
            trailing = line.split("  # ", 1)[1] if "  # " in line else ""
            comments[field.group(1)] = " ".join([*pending, trailing]).strip()
        if not line.startswith("    #"):
            pending = []
        if line.startswith("def ") or line.startswith("class "):
            break
    return comments


def settings_table() -> str:
    from punctual.runtime.settings import DEPLOYED, Settings, context_key, default_of, env_value

    comments = setting_comments()
    rows = [
        "| variable | type | default | bounds | context key | what it is |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, info in Settings.model_fields.items():
        kind = getattr(info.annotation, "__name__", None) or str(info.annotation)
        bounds = []
        for rule in info.metadata:
            for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
                if (value := getattr(rule, attribute, None)) is not None:
                    bounds.append(f"{sign} {value:,}")
            if (pattern := getattr(rule, "pattern", None)) is not None:
                bounds.append(f"`{pattern}`")
        default = env_value(default_of(name))
        key = f"`{context_key(name)}`" if name in DEPLOYED else ""
        shown = f"`{default}`" if default else "(empty)"
        rows.append(
            f"| `{Settings.variable(name)}` | {cell(kind)} | {cell(shown)} "
            f"| {cell(', '.join(bounds))} | {key} | {cell(comments.get(name, ''))} |"
        )
    return "\n".join(rows)


def cli_help() -> str:
    from punctual_cli.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: the page's is fixed
    parser = build_parser()
    blocks = [("punctual", parser.format_help())]

    def walk(command: argparse.ArgumentParser, prefix: str) -> None:
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    blocks.append((f"{prefix} {name}", sub.format_help()))
                    walk(sub, f"{prefix} {name}")

    walk(parser, "punctual")
    return "\n\n".join(f"### `{name}`\n\n```text\n{text.rstrip()}\n```" for name, text in blocks)


def schema_table(path: str) -> str:
    schema: dict[str, Any] = json.loads((ROOT / path).read_text(encoding="utf-8"))
    required = set(schema.get("required", ()))
    rows = ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for name, field in schema["properties"].items():
        kind = field.get("type") or ("const " + json.dumps(field["const"]) if "const" in field else "")
        if isinstance(kind, list):
            kind = " or ".join(kind)
        if "enum" in field:
            kind = f"{kind} ({', '.join(map(str, field['enum']))})".strip()
        needed = "yes" if name in required else ""
        rows.append(f"| `{name}` | {cell(kind)} | {needed} | {cell(field.get('description', ''))} |")
    return "\n".join(rows)


GENERATORS: dict[str, Callable[..., str]] = {
    "settings": settings_table,
    "cli": cli_help,
    "schema": schema_table,
}
