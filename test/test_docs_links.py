"""The project's pages point at files that exist: every relative link in README.md, docs/*.md and the benchmarks'
READMEs, and every `benchmarks/...` or `docs/...` path they quote in inline code, names a file or folder of the
checkout. A benchmark file renamed or deleted without its page fails here. No SGLang import."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "scripts" / "gpu" / "README.md"]
    + list((ROOT / "docs").glob("*.md"))
    + list((ROOT / "benchmarks").glob("*/README.md"))
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
CODE = re.compile(r"`((?:benchmarks|docs)/[^`\s]*)`")  # `benchmarks/...` quoted as a repository path
PLACEHOLDER = re.compile(r"[<>*{}$]|LINE|\.\.\.")  # `benchmarks/<topic>/`, globs, shell variables: not one path


def prose(text: str) -> str:
    """The page without its fenced code blocks (commands write to $OUT and quote paths they create)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def broken(page: Path) -> list[str]:
    text = prose(page.read_text())
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        if not (page.parent / target.split("#")[0]).exists():
            out.append(f"link {target}")
    for path in CODE.findall(text):
        if not PLACEHOLDER.search(path) and not (ROOT / path).exists():
            out.append(f"`{path}`")
    return out


def test_there_are_pages_to_check():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/results.md", "docs/gpu.md", "benchmarks/step_31b/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_linked_path_exists(page):
    missing = broken(page)
    assert not missing, (
        f"{page.relative_to(ROOT)} points at paths that do not exist: {missing}; "
        "fix the path, or restore the file if a current figure rests on it"
    )
