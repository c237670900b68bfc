"""The repository speaks of the product: no tracked text file names a work session, an
issue number or a script under the git-ignored .gpu/ folder (which a clone does not have)."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
             "twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|"
             "nineteenth|twentieth")
#: What a file may not say, with why.
FORBIDDEN = {
    "a work session": re.compile(rf"\b(({_ORDINALS})[ -]session|session ?\d+|work period)\b",
                                 re.IGNORECASE),
    "a diary": re.compile(r"\bdiary\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    # (.gitignore names the folder as "/.gpu/", which is no script)
    "a script outside the repository": re.compile(r"(?<![\w/])\.gpu/"),
}
#: This file states the rules, so it contains what they look for.
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()


def tracked_text_files():
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or name == THIS or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (a plot)
            continue
        yield name, data.decode("utf-8", errors="replace")


def test_no_tracked_file_names_sessions_issues_or_ignored_scripts():
    found = []
    for name, text in tracked_text_files():
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{name}:{line}: {what}: {match.group(0)!r}")
    assert not found, "\n".join(found[:40])


@pytest.mark.parametrize("text,what", [
    ("measured in the seventeenth session", "a work session"),
    ("see session 12", "a work session"),
    ("as issue 37 asks", "an issue number"),
    ("run .gpu/seg_ab.py", "a script outside the repository"),
    ("the lab diary", "a diary"),
])
def test_the_rules_see_what_they_forbid(text, what):
    assert FORBIDDEN[what].search(text)


def test_the_rules_leave_ordinary_words():
    for text in ('scope="session"', "a session of pytest", "the issues a user meets",
                 "docs/results/scan-h200.json", "x.gpu_array"):
        assert not any(p.search(text) for p in FORBIDDEN.values()), text
