"""Qwen2.5-Math's evaluator, as its scripts grade MATH, run on cases from stdin.

Run by test_math_conformance.py as ``python -I qwen25_math_reference.py LIBS`` where
LIBS holds the evaluator's pinned requirements (evaluation/requirements.txt:
antlr4-python3-runtime 4.11.1 for its generated parser, sympy 1.12; and word2number),
installed with ``pip --target``; they come first on the path, before the vendored
evaluator (qwen25_math/, QwenLM/Qwen2.5-Math evaluation/ at a45202b, MIT) and the
driver's site-packages (numpy, regex, mpmath). Not imported by distillery.

stdin: a JSON list of cases, each ``{"reply": ...}`` (a model's whole reply) or
``{"pred": ...}`` (an extracted answer), and ``{"solution": ...}`` (MATH's reference
solution) or ``{"gt": ...}`` (a gold answer). stdout: a JSON list of
``{"pred", "gt", "correct", "timeout"}``, the evaluator's pipeline step by step:
  pred = strip_string(extract_answer(reply, "math"))   # math_eval.py -> run_execute
  gt   = parse_ground_truth({"solution": ...}, "math")  # or strip_string(gt)
  correct = math_equal(pred, gt)                        # evaluate.py, 3 s a grading
"""

from __future__ import annotations

import json
import signal
import site
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "qwen25_math"
TIMEOUT_S = 3  # evaluate.py: ProcessPool.map(math_equal_process, ..., timeout=3)


def _path(libs: str) -> None:
    sys.path[:0] = [libs, str(HERE), str(HERE / "latex2sympy")]
    sys.path.extend(site.getsitepackages())


class _Late(Exception):
    pass


def _alarm(signum, frame):
    raise _Late


def main() -> int:
    _path(sys.argv[1])
    from importlib.metadata import version

    import antlr4  # noqa: F401 - the pinned one must win over the driver's

    assert version("antlr4-python3-runtime") == "4.11.1", version("antlr4-python3-runtime")
    from grader import math_equal  # type: ignore[import-not-found]
    from parser import extract_answer, parse_ground_truth, strip_string  # type: ignore

    signal.signal(signal.SIGALRM, _alarm)
    out = []
    for case in json.load(sys.stdin):
        if "reply" in case:
            pred = strip_string(extract_answer(case["reply"], "math"))
        else:
            pred = strip_string(case["pred"])
        if "solution" in case:
            gt = parse_ground_truth({"solution": case["solution"]}, "math")[1]
        else:
            gt = strip_string(case["gt"])
        signal.alarm(TIMEOUT_S)
        try:
            correct, timeout = bool(math_equal(pred, gt)), False
        except _Late:
            correct, timeout = False, True
        except Exception:  # noqa: BLE001 - evaluate.py stops; a case here is wrong
            correct, timeout = False, False
        finally:
            signal.alarm(0)
        out.append({"pred": pred, "gt": gt, "correct": correct, "timeout": timeout})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
