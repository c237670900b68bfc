"""The README and the guide stay true: their code parses, their commands run, they name
every algorithm, operator, type and primitive."""
import ast
import re
import shlex
from pathlib import Path

import pytest

import scangen
from scangen.cli import PRIMITIVES, build_parser, main
from scangen.types import OPTIONAL_TYPES
from tests.support import BFLOAT16, USER_PAGES, needs_bfloat16, optional_nvcc

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
USER_DOCS = "\n".join(page.read_text() for page in USER_PAGES)


def fenced_blocks(language, text=USER_DOCS):
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_quick_start_parses_and_uses_the_public_api():
    blocks = fenced_blocks("python")
    assert blocks, "the docs have no ```python block"
    for block in blocks:
        ast.parse(block)
    quick_start = fenced_blocks("python", README)[0]
    for name in ("scangen.Scan(", "scangen.Operator(", "out=", ".source"):
        assert name in quick_start
    for attribute in re.findall(r"scangen\.(\w+)", "\n".join(blocks)):
        assert hasattr(scangen, attribute), f"the docs use scangen.{attribute}, which is not public"


def test_docs_name_every_algorithm_and_strategy():
    for name in scangen.ALGORITHMS:
        assert f"`{name}`" in USER_DOCS, name
    for name in scangen.STRATEGIES:  # a row of the strategy table each
        assert f"\n| `{name}`" in USER_DOCS, name


def test_docs_name_every_builtin_operator_and_dtype():
    for name in scangen.BUILTIN_OPERATORS:
        assert f"`{name}`" in USER_DOCS, name
    for etype in scangen.ELEMENT_TYPES.values():
        assert f"`{etype.name}`" in USER_DOCS, etype.name
    for name, (package, c_name, header, _) in OPTIONAL_TYPES.items():
        assert f"`{name}`" in USER_DOCS and package in USER_DOCS and f"`{c_name}`" in USER_DOCS
        assert f"`{header}`" in USER_DOCS


def test_docs_name_every_primitive():
    """Each public name of a primitive (its module's __all__), and each on the command line
    (source and plan)."""
    for name in scangen.primitives.__all__:
        assert f"`{name}`" in USER_DOCS or f"scangen.{name}(" in USER_DOCS, name
    commands = USER_DOCS[USER_DOCS.index("`source` prints the CUDA"):]
    commands = commands[:commands.index("\n\n")]
    for name in PRIMITIVES:
        assert f"`{name}`" in commands or f"`source {name}`" in commands, name


def result_dtype_pairs():
    """``(source, result, refused)`` for every `a` → `b` pair of the docs' result_dtype
    table."""
    table = USER_DOCS[USER_DOCS.index("| input | result_dtype (examples) |"):]
    table = table[:table.index("\n\n")]
    rows = [line for line in table.splitlines() if line.strip().startswith("| ")][2:]
    return [(source, result, row.strip().startswith("| refused |")) for row in rows
            for source, result in re.findall(r"`(\w+)` → `(\w+)`", row)]


def check_result_dtype(source, result, refused):
    dtypes = [BFLOAT16 if d == "bfloat16" else d for d in (source, result)]
    if refused:
        with pytest.raises(TypeError, match=f"cannot hold every {source} value"):
            scangen.Scan(dtypes[0], "add", result_dtype=dtypes[1])
    else:
        scan = scangen.Scan(dtypes[0], "add", result_dtype=dtypes[1])
        assert scan.dtype.name == result and scan.input_dtype.name == source


def test_docs_result_dtype_table_matches_the_code():
    """Every `a` → `b` pair the table shows converts, and those of its 'refused' row do not
    (the bfloat16 pairs in the next test)."""
    pairs = [pair for pair in result_dtype_pairs() if "bfloat16" not in pair[:2]]
    for pair in pairs:
        check_result_dtype(*pair)
    assert len(pairs) >= 12


@needs_bfloat16
def test_docs_result_dtype_table_matches_the_code_for_bfloat16():
    pairs = [pair for pair in result_dtype_pairs() if "bfloat16" in pair[:2]]
    for pair in pairs:
        check_result_dtype(*pair)
    assert len(pairs) >= 4


def test_readme_gives_the_test_command_and_the_gpu_switch():
    commands = "\n".join(fenced_blocks("sh", README))
    assert re.search(r"^python -m pytest -q(\s|$)", commands, flags=re.M)
    assert "SCANGEN_REQUIRE_GPU=1" in README
    assert "## Performance" in README


def docs_cli_commands():
    lines = "\n".join(fenced_blocks("sh")).splitlines()
    return [shlex.split(line.split("#")[0])[3:] for line in lines
            if line.startswith("python -m scangen ")]


def test_docs_show_the_command_line():
    assert len(docs_cli_commands()) >= 5


@pytest.mark.parametrize("argv", docs_cli_commands(), ids=" ".join)
def test_docs_cli_commands_run(argv, capsys):
    if "--check" in argv and optional_nvcc() is None:
        argv = [a for a in argv if a != "--check"]  # compiling needs nvcc; the rest runs
    args = build_parser().parse_args(argv)
    if args.command in ("source", "plan"):  # the others need a GPU
        assert main(argv) == 0, capsys.readouterr().err


def test_examples_parse_and_have_main():
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert {p.stem for p in examples} >= {"sandwich", "running_max", "custom_operator",
                                          "compaction", "linear_recurrence"}
    for path in examples:
        tree = ast.parse(path.read_text(), filename=str(path))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "main" in functions, path.name
        assert ast.get_docstring(tree), f"{path.name} needs a docstring saying what it shows"
