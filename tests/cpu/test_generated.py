"""The generated CUDA and plans of a fixed list of specs (tests.support.generated) are the
ones recorded in generated.sha256: a refactor leaves what runs as it was."""
from pathlib import Path

from tests.support.generated import hashes

RECORDED = Path(__file__).with_name("generated.sha256")


def _recorded() -> dict[str, str]:
    lines = RECORDED.read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines if line)}


def test_generated_code_is_as_recorded():
    recorded, now = _recorded(), hashes()
    assert sorted(now) == sorted(recorded), "the case list changed: rewrite generated.sha256"
    changed = [name for name in now if now[name] != recorded[name]]
    assert not changed, (
        f"generated code changed for {changed}; if that is meant, rewrite the record with "
        "`python -m tests.support.generated hashes > tests/cpu/generated.sha256` and say why "
        "in the commit")
