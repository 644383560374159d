"""The math grader against the references themselves, on cases we did not write.

- Qwen2.5-Math's evaluator (the one the AgentBrew paper scores MATH and GSM8K with),
  vendored unchanged in conformance/qwen25_math/ and run with its own pinned
  requirements (conformance/qwen25_math_reference.py), and the verdicts it recorded on
  800 real model replies to MATH problems (conformance/qwen25_math_cot_100.jsonl.gz).
- math-verify's own test cases (conformance/math_verify_tests.json) under the ANTLR
  runtime the project keeps, with the regenerated parser (mathgrade/latex_parser.py).
- Answer forms Qwen's evaluator handles: percents, units, \\text{}, degrees, thousands
  separators, intervals, matrices and more, through the grader processes.

Every disagreement with Qwen's evaluator is listed here and in docs/benchmarks/math.md
with who is right and why; a new one fails the test.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.mathgrade import latex_parser
from distillery.workers.envs.mathgrade.answers import extract_answer, math_gold
from distillery.workers.envs.mathgrade.grader import shared_grader
from distillery.workers.envs.registry import make_benchmark

CONFORMANCE = Path(__file__).resolve().parent / "conformance"
REFERENCE = CONFORMANCE / "qwen25_math_reference.py"
# Qwen2.5-Math evaluation/requirements.txt pins these two (and names word2number).
REFERENCE_REQUIREMENTS = ("antlr4-python3-runtime==4.11.1", "sympy==1.12", "word2number==1.1")
UNREACHABLE = ("Could not find a version", "No matching distribution", "onnection")

# (form, gold, answer, our verdict, Qwen's evaluator's verdict where it differs and why
# ours is right). The same table is in docs/benchmarks/math.md.
# fmt: off
FORMS: list[tuple[str, str, str, bool, tuple[bool, str] | None]] = [
    ("percent", "25\\%", "25", True, None),
    ("percent", "25\\%", "25\\%", True, None),
    ("percent", "25", "25\\%", True, None),
    ("percent", "25\\%", "0.25", True, None),
    ("percent", "12.5\\%", "12.5", True, None),
    ("percent", "33.3\\%", "33.3", True, None),
    ("percent", "2.5\\%", "0.025", True, None),
    ("percent", "40\\%", "40 \\%", True, None),
    ("percent", "5\\%", "5%", True, None),
    ("percent", "25\\%", "26", False, None),
    ("percent", "25\\%", "26\\%", False, None),
    ("percent", "25\\%", "0.25\\%", False,
     (True, "strip_string drops both percent signs and math_equal's reference/100 "
            "lenience then takes 0.25 for 25: 0.25% is not 25%")),
    ("percent", "0.25", "25", False,
     (True, "Qwen's math_equal accepts reference/100, reference and reference*100 for "
            "every number, percent or not: 25 for 0.25 is a wrong answer")),
    ("percent", "25", "2500", False,
     (True, "the same: 2500 for 25 (no percent in either) is a wrong answer")),
    ("units", "10\\text{ cm}", "10", True, None),
    ("units", "10", "10\\text{ cm}", True, None),
    ("units", "10\\text{ cm}", "11\\text{ cm}", False, None),
    ("units", "100\\text{ square units}", "100", True, None),
    ("units", "6\\text{ inches}", "6", True, None),
    ("units", "\\$18.90", "18.90", True, None),
    ("units", "18.90", "\\$18.90", True, None),
    ("units", "5\\mbox{ cm}^2", "5", True,
     (False, "strip_string removes the \\mbox{ cm} unit and keeps its ^2: it compares 5 "
             "with 5^2 = 25")),
    ("units", "20\\text{ mph}", "21", False, None),
    ("text", "\\text{(C)}", "C", True, None),
    ("text", "\\text{(C)}", "\\text{(C)}", True, None),
    ("text", "\\text{(C)}", "(D)", False, None),
    ("text", "\\text{Devon}", "Devon", True, None),
    ("text", "\\text{Devon}", "\\text{devon}", True, None),
    ("text", "\\text{odd}", "\\text{even}", False, None),
    ("degrees", "30^\\circ", "30", True, None),
    ("degrees", "30", "30^{\\circ}", True, None),
    ("degrees", "30^\\circ", "30^\\circ", True, None),
    ("degrees", "45^{\\circ}", "45", True, None),
    ("degrees", "120^\\circ", "60^\\circ", False, None),
    ("thousands", "1,000", "1000", True, None),
    ("thousands", "1000", "1,000", True, None),
    ("thousands", "1,000,000", "1000000", True, None),
    ("thousands", "7,425,000", "7425000", True, None),
    ("thousands", "1\\,000", "1000", True, None),
    ("thousands", "1\\,000\\,000", "1000000", True, None),
    ("thousands", "10{,}000", "10000", True,
     (False, "strip_string keeps the {,} of MATH's 10{,}000 and math_equal cannot read "
             "it (the one disagreement on the 800 recorded replies, problem 72)")),
    ("thousands", "1,000", "1001", False, None),
    ("interval", "(1,2]", "(1,2]", True, None),
    ("interval", "(1,2]", "(1, 2]", True, None),
    ("interval", "[-2,7]", "[-2,7]", True, None),
    ("interval", "(-\\infty,3)", "(-\\infty, 3)", True, None),
    ("interval", "(-\\infty,-2)\\cup(3,\\infty)", "(-\\infty,-2)\\cup(3,\\infty)", True, None),
    ("interval", "(1,2]", "[1,2]", False,
     (True, "math_equal compares intervals element by element and ignores whether an "
            "end is open or closed: [1,2] is another set")),
    ("interval", "(-\\infty,3)", "(-\\infty,3]", False,
     (True, "the same: the closed end makes another set")),
    ("interval", "(-\\infty,-2)\\cup(3,\\infty)", "(-\\infty,-2)\\cup(4,\\infty)", False,
     (True, "math_equal splits the union on commas into pieces it compares loosely; "
            "(4, oo) is another set")),
    ("matrix", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
     True, None),
    ("matrix", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{bmatrix}1\\\\2\\end{bmatrix}",
     True, None),
    ("matrix", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\3\\end{pmatrix}",
     False, None),
    ("matrix", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
     True, None),
    ("matrix", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}",
     False, None),
    ("matrix", "\\begin{pmatrix}\\frac{1}{2}\\\\-1\\end{pmatrix}",
     "\\begin{pmatrix}0.5\\\\-1\\end{pmatrix}", True, None),
    ("fraction", "\\frac{1}{2}", "0.5", True, None),
    ("fraction", "\\dfrac{3}{4}", "\\frac34", True, None),
    ("fraction", "\\frac{1}{2}", "1/2", True, None),
    ("fraction", "\\frac{1}{3}", "0.33", False, None),
    ("sqrt", "2\\sqrt{2}", "\\sqrt{8}", True, None),
    ("sqrt", "\\sqrt{3}", "\\sqrt3", True, None),
    ("sqrt", "2\\sqrt{2}", "2\\sqrt{3}", False, None),
    ("pi", "\\frac{\\pi}{2}", "\\frac{\\pi}{2}", True, None),
    ("tuple", "(3,-1)", "(3, -1)", True, None),
    ("tuple", "(3,-1)", "(-1,3)", False, None),
    ("set", "\\{1,2\\}", "\\{2,1\\}", True, None),
    ("list", "1, 2, 3", "3, 2, 1", True,
     (False, "math_equal compares a comma list in order; MATH's lists are the solutions "
             "of a problem ('enter all the solutions, separated by commas'), in any order")),
    ("list", "1,2", "1,3", False, None),
    ("equation", "x=5", "5", True, None),
    ("equation", "5", "x = 5", True, None),
    ("equation", "y=2x+3", "y=2x+3", True, None),
    ("expression", "x^2+2x+1", "(x+1)^2", True, None),
    ("expression", "x^2+2x+1", "(x-1)^2", False, None),
    ("negative", "-5", "-5", True, None),
    ("negative", "-5", "5", False, None),
    ("decimal", "0.4", ".4", True, None),
    ("decimal", "3.14", "3.1400", True, None),
    ("infinity", "\\infty", "\\infty", True, None),
    ("complex", "1+2i", "2i+1", True, None),
    ("gamma", "\\Gamma(3)", "2", True,
     (False, "its latex2sympy has no \\Gamma: Gamma(3) is 2")),
    ("base", "1011_2", "1011_2", True, None),
    ("choice", "\\text{(A)}", "A", True, None),
    ("choice", "B", "\\textbf{(B)}", True, None),
]
# fmt: on

# The recorded replies on which our verdict differs from Qwen's: (problem idx, reply
# index) -> why ours is right. Each is also in FORMS and in docs/benchmarks/math.md.
RECORDED_DISAGREEMENTS = {
    (72, 7): "gold 10{,}000, answer 10000: Qwen's strip_string keeps {,} (FORMS: thousands)"
}


def _recorded() -> list[dict]:
    with gzip.open(CONFORMANCE / "qwen25_math_cot_100.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def _qwen_verdicts(libs: Path, cases: list[dict]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-I", str(REFERENCE), str(libs)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def qwen_reference_libs(tmp_path_factory) -> Path:
    """The evaluator's pinned requirements, installed beside (not into) our venv."""
    cached = os.environ.get("DISTILLERY_TEST_ENVS_DIR")
    root = Path(cached) if cached else tmp_path_factory.mktemp("qwen25_math_libs")
    libs = root / "qwen25_math_reference_libs"
    marker = libs / ".installed"
    # Keyed on the pins and this interpreter's version: anything else is reinstalled.
    installed = "\n".join([*REFERENCE_REQUIREMENTS, f"python {sys.version}"])
    if marker.exists() and marker.read_text() == installed:
        return libs
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
         "--target", str(libs), *REFERENCE_REQUIREMENTS],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    if done.returncode != 0 and any(sign in done.stderr for sign in UNREACHABLE):
        pytest.skip("the package index cannot serve Qwen2.5-Math's evaluator requirements")
    assert done.returncode == 0, done.stderr[-3000:]
    marker.write_text(installed)
    return libs


def test_the_parser_is_the_grammars_own_under_antlr_4_9_3():
    if not latex_parser.needed():
        pytest.skip("the ANTLR runtime here is not 4.9.3: the library's parser is current")
    from latex2sympy2_extended.gen.antlr4_9_3.PSParser import PSParser as Stale

    assert not hasattr(Stale.AtomContext, "FUNC_GAMMA")  # why it is replaced
    assert latex_parser.install() == "regenerated parser"
    assert latex_parser.install() == "regenerated parser"  # once is enough, twice is harmless
    from latex2sympy2_extended.latex2sympy2 import latex2sympy

    assert str(latex2sympy("25\\%")) == "25*(1/100)"  # raised AttributeError before
    assert latex2sympy("\\Gamma(3)") == 2


def test_a_parser_for_another_grammar_is_refused(monkeypatch, math_dir):
    if not latex_parser.needed():
        pytest.skip("the ANTLR runtime here is not 4.9.3")
    real = latex_parser._installed
    monkeypatch.setattr(latex_parser, "_installed",
                        lambda name: "1.12.0" if name == "latex2sympy2_extended" else real(name))  # fmt: skip
    with pytest.raises(latex_parser.ParserMismatch, match=r"1\.12\.0 is installed"):
        latex_parser.install()
    with pytest.raises(BenchmarkUnavailable, match=r"math: latex2sympy2_extended 1\.12\.0"):
        make_benchmark("math", {"data_path": str(math_dir)})


@pytest.mark.parametrize("form, gold, answer, correct, qwen", FORMS,
                         ids=[f"{f[0]}:{f[1]}|{f[2]}" for f in FORMS])  # fmt: skip
def test_answer_forms(form, gold, answer, correct, qwen):
    verdict = shared_grader().grade(gold, answer, 60)
    assert not verdict.timed_out
    assert verdict.correct is correct, verdict


def test_math_verify_passes_its_own_test_cases_under_our_runtime():
    """Every parametrized case of math-verify's own suite, as its tests call it, with
    the parser the grader processes use (the stale one failed a percent case)."""
    latex_parser.install()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    data = json.loads((CONFORMANCE / "math_verify_tests.json").read_text())
    failed = []
    for case in data["cases"]:
        if "call" in case:
            got = verify(parse(case["gold"]), parse(case["pred"]))
        else:
            targets = [LatexExtractionConfig(boxed_match_priority=0) if kind == "latex"
                       else ExprExtractionConfig() for kind in case["match_types"]]  # fmt: skip
            got = verify(
                parse(case["gold"], targets), parse(case["pred"], targets),
                float_rounding=case.get("precision", 6), strict=case.get("strict", True),
                allow_set_relation_comp=case.get("allow_set_relation_comp", False),
            )  # fmt: skip
        if int(got) != case["expected"]:
            failed.append((case["file"], case["test"], case["gold"][:60], case["pred"][-60:]))
    assert len(data["cases"]) == 269
    assert failed == []


def test_real_replies_agree_with_the_verdicts_qwen_recorded():
    """800 replies of a Qwen2.5-Math model to 100 MATH problems, graded as our `math`
    benchmark grades (extract_answer, math_gold, the grader processes), against the
    verdicts Qwen's evaluator recorded with them."""
    grader = shared_grader()
    differ = {}
    rows = _recorded()
    for row in rows:
        gold = math_gold(row["solution"])
        for i, (reply, recorded) in enumerate(zip(row["responses"], row["score"], strict=True)):
            verdict = grader.grade(gold, extract_answer(reply), 60)
            assert not verdict.timed_out
            if verdict.correct != recorded:
                differ[(row["idx"], i)] = (gold, extract_answer(reply), recorded)
    assert sum(len(r["responses"]) for r in rows) == 800
    assert set(differ) == set(RECORDED_DISAGREEMENTS), differ
    assert all(recorded is False for *_, recorded in differ.values())  # ours: correct


def test_qwens_evaluator_itself(qwen_reference_libs):
    """The vendored evaluator reproduces every answer and verdict it recorded (so it is
    the one that graded them), our extraction gives its answers, and on the forms above
    it gives the verdicts the table says."""
    rows = _recorded()
    cases = [{"reply": reply, "solution": row["solution"]}
             for row in rows for reply in row["responses"]]  # fmt: skip
    got = _qwen_verdicts(qwen_reference_libs, cases)
    recorded_pred = [p for row in rows for p in row["pred"]]
    recorded_score = [s for row in rows for s in row["score"]]
    assert [g["pred"] for g in got] == recorded_pred
    assert [g["correct"] for g in got] == recorded_score
    # Our extraction is Qwen's: normalised by its strip_string, it is what it recorded.
    ours = [
        {"pred": extract_answer(reply), "gt": "0"} for row in rows for reply in row["responses"]
    ]
    assert [g["pred"] for g in _qwen_verdicts(qwen_reference_libs, ours)] == recorded_pred

    got = _qwen_verdicts(qwen_reference_libs,
                         [{"pred": answer, "gt": gold} for _, gold, answer, _, _ in FORMS])  # fmt: skip
    expected = [correct if qwen is None else qwen[0] for *_, correct, qwen in FORMS]
    mismatched = [(f[:3], g["correct"]) for f, g, e in zip(FORMS, got, expected, strict=True)
                  if g["correct"] != e]  # fmt: skip
    assert mismatched == []
    assert not any(g["timeout"] for g in got)
