"""math-verify's LaTeX parser, made whole under the ANTLR runtime the project keeps.

hydra-core and omegaconf pin ``antlr4-python3-runtime`` 4.9.*; latex2sympy2_extended
(math-verify's LaTeX parser) ships one generated parser per ANTLR runtime, and the one
for 4.9.3 in its 1.11.0 wheel was generated from an older grammar than the other two:
its ``atom`` rule lacks ``FUNC_GAMMA``, so the converter's ``atom.FUNC_GAMMA()`` raises
``AttributeError`` on every atom it reaches that branch for — every percent (``25\\%``),
among others — and math-verify falls back to comparing strings: ``\\boxed{25}`` against
gold ``25\\%`` was wrong.

The fix is the grammar's own parser, generated for 4.9.3 (`ps_parser_antlr4_9_3.py`,
how it was made is in its header), put in place of the stale one. Why not the other
ways out: a grader venv with a newer ANTLR would give every worker a second
environment to build and keep in step with the driver's math-verify, for the same
parser this file gives in-process; normalising ``\\%`` away before parsing (Qwen2.5-Math's
``strip_string`` does) would mend percents only, not the other atoms the stale parser
cannot convert (``\\Gamma(3)``), and would hide a percent from math-verify's own rule for
it (``25\\%`` equals 25 and 0.25). The replacement is exact: it is installed only
for the grammar it was generated from (latex2sympy2_extended 1.11.0, which math-verify
0.9.0 pins) under the runtime it was generated for (4.9.3); elsewhere the library's own
parser is left alone (a runtime whose parser is current needs nothing), and a 4.9.3
runtime with another latex2sympy2_extended is refused rather than half-mended.
"""

from __future__ import annotations

import hashlib
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

GENERATED = Path(__file__).resolve().parent / "ps_parser_antlr4_9_3.py"
GENERATED_SHA256 = "0be9a53ff9b971d8c976bac8a28ae22237d275b5b9d64501c39ebfd1fd2b9831"
GRAMMAR_RELEASE = "1.11.0"  # the latex2sympy2_extended release whose PS.g4 it comes from
RUNTIME = "4.9.3"


class ParserMismatch(RuntimeError):
    """The installed latex2sympy2_extended is not the one the parser was made for."""


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def needed() -> bool:
    """Whether the installed latex2sympy2_extended would use its stale 4.9.3 parser."""
    return _installed("antlr4-python3-runtime").startswith(RUNTIME)


def check() -> None:
    """`ParserMismatch` where the regenerated parser is needed but made for another
    grammar (checked before a run starts, from package metadata only)."""
    if not needed():
        return
    release = _installed("latex2sympy2_extended")
    if release != GRAMMAR_RELEASE:
        raise ParserMismatch(
            f"latex2sympy2_extended {release or '(missing)'} is installed; the ANTLR "
            f"{RUNTIME} parser in {GENERATED.name} was generated from {GRAMMAR_RELEASE}'s "
            "grammar (math-verify==0.9.0 pins it)"
        )


def install() -> str:
    """Puts the regenerated parser in place of latex2sympy2_extended's stale one (once;
    before or after math-verify is imported). Returns what it did, for the record."""
    if not needed():
        return "library parser (runtime " + (_installed("antlr4-python3-runtime") or "none") + ")"
    check()
    import latex2sympy2_extended.antlr_parser as antlr_parser
    import latex2sympy2_extended.latex2sympy2 as converter

    if getattr(converter.PSParser, "regenerated_for_4_9_3", False):
        return "regenerated parser"
    digest = hashlib.sha256(GENERATED.read_bytes()).hexdigest()
    if digest != GENERATED_SHA256:
        raise ParserMismatch(f"{GENERATED} is not the generated file (sha256 {digest})")
    spec = importlib.util.spec_from_file_location("distillery_ps_parser_antlr4_9_3", GENERATED)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = module.PSParser
    parser.regenerated_for_4_9_3 = True
    # The converter looks PSParser up in its module's globals on every parse.
    converter.PSParser = parser
    antlr_parser.PSParser = parser
    return "regenerated parser"
