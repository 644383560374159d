"""Benchmark adapters by name, so configs and Ray workers can refer to them as strings.

A name maps to ``"module:Class"``, imported only when the benchmark is used: naming a
benchmark in a config imports nothing. The project's own benchmarks are listed in
`BENCHMARKS`; another package registers one in the entry-point group
``distillery.benchmarks`` of its distribution (pyproject.toml)::

    [project.entry-points."distillery.benchmarks"]
    my_bench = "my_package.bench:MyBenchmark"

    [project.entry-points."distillery.conf"]
    my_package = "my_package.conf"   # holds benchmark/my_bench.yaml: benchmark=my_bench

The class implements `distillery.workers.envs.base.Benchmark`. The second group is
optional: it adds the package's config groups to Hydra's search path (see
`distillery.orchestrator.core.compose.compose`), so `benchmark=my_bench` selects its yaml;
without it, `benchmark.name=my_bench` works on top of another benchmark's yaml.
tests/plugins/toy_plugin is a complete example, run end to end by the tests. The
registry machinery (lazy loading, entry points, errors) is `distillery.workers.plugins`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from distillery.workers.envs.base import (
    ANSWER,
    TOOL_CALLS,
    Benchmark,
    BenchmarkOptions,
    BenchmarkUnavailable,
)
from distillery.workers.envs.conventions import AgentConventions, conventions_of
from distillery.workers.plugins import PluginLoadError, PluginRegistry, Registration, lacking

ENTRY_POINT_GROUP = "distillery.benchmarks"

# The project's own benchmarks: name -> "module:Class".
BENCHMARKS: dict[str, str] = {
    "bfcl_multi_turn_base": "distillery.workers.envs.bfcl:BfclMultiTurnBase",
    "gsm8k": "distillery.workers.envs.gsm8k.benchmark:Gsm8k",
    "math": "distillery.workers.envs.math.benchmark:Math",
    "mbpp": "distillery.workers.envs.mbpp.benchmark:Mbpp",
    "humaneval": "distillery.workers.envs.humaneval.benchmark:HumanEval",
    "appworld": "distillery.workers.envs.appworld.adapter:AppWorld",
    "toolsandbox": "distillery.workers.envs.toolsandbox.benchmark:ToolSandbox",
}

# What the orchestrator reads from a benchmark class (besides the episode methods).
_CLASS_FACTS = ("name", "groups_are_scenarios", "options_model", "fingerprint", "versions")


class BenchmarkLoadError(PluginLoadError):
    """A registered benchmark could not be loaded (a broken module or entry point): a
    setup problem the message names, not a bug of the run."""


def _validate(cls: Any, registration: Registration, where: str) -> type[Benchmark]:
    value = registration.value
    missing = lacking(cls, _CLASS_FACTS)
    if not isinstance(cls, type) or missing:
        raise BenchmarkLoadError(
            f"{where}: {value} is not a Benchmark class"
            + (f" (it lacks {', '.join(missing)})" if missing else "")
        )
    if not (
        isinstance(cls.options_model, type) and issubclass(cls.options_model, BenchmarkOptions)
    ):
        raise BenchmarkLoadError(
            f"{where}: {value}.options_model must be a subclass of BenchmarkOptions"
        )
    known = getattr(cls, "known_deviations", ())
    if not (isinstance(known, tuple) and all(isinstance(d, str) for d in known)):
        raise BenchmarkLoadError(f"{where}: {value}.known_deviations must be a tuple of names")
    conventions = getattr(cls, "conventions", None)
    if conventions is not None and not isinstance(conventions, AgentConventions):
        raise BenchmarkLoadError(
            f"{where}: {value}.conventions must be an AgentConventions, "
            f"not {type(conventions).__name__}"
        )
    return cls


def _not_installed(registration: Registration, exc: ModuleNotFoundError) -> BenchmarkUnavailable:
    # Said before a run starts, with the fix (the requirements check).
    missing = exc.name or str(exc)
    return BenchmarkUnavailable(
        f"{registration.value} ({registration.origin}) needs module {missing}, "
        "which is not installed",
        f"install the package that provides {missing}",
    )


REGISTRY: PluginRegistry[type[Benchmark]] = PluginRegistry(
    "benchmark",
    ENTRY_POINT_GROUP,
    BENCHMARKS,
    _validate,
    error=BenchmarkLoadError,
    missing_module=_not_installed,
    passthrough=(BenchmarkUnavailable,),  # the adapter's own word on what is missing
)


def known_benchmarks() -> list[str]:
    """The names a config may use: built-ins and entry points, sorted."""
    return REGISTRY.names()


def benchmark_class(name: str) -> type[Benchmark]:
    """The adapter class registered as `name`, imported now (its module once)."""
    return REGISTRY.load(name)


def benchmark_options(name: str, options: Mapping[str, Any] | None = None) -> BenchmarkOptions:
    """`options` validated by the benchmark's options model (pydantic's ValidationError
    on a bad one, its locations being the option names)."""
    return benchmark_class(name).options_model.model_validate(dict(options or {}))


def benchmark_splits(name: str) -> tuple[str, ...]:
    """The splits a benchmark has: the values of its options' `split` field (a Literal),
    () for a benchmark without splits (BFCL). A benchmark with splits plays the one its
    `split` option names; protocol=split reads memory from another."""
    field = benchmark_class(name).options_model.model_fields.get("split")
    if field is None:
        return ()
    from typing import Literal, get_args, get_origin

    def values(hint: Any) -> list[str]:  # a Literal, or a union with one (`| None`)
        if get_origin(hint) is Literal:
            return [str(v) for v in get_args(hint)]
        return [v for arg in get_args(hint) for v in values(arg)]

    return tuple(values(field.annotation))


def identity_options(name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options that differ from their defaults, deviations excepted, as JSON: what
    enters episode identity as options (and what a benchmark adds there itself, e.g.
    AppWorld's data digest, which its default options have too)."""
    return benchmark_options(name, options).identity()


def benchmark_deviations(name: str, options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the deviations from the benchmark's own pipeline that `options`
    turn on (recorded with the run and in episode identity); default options may have
    some (AppWorld without the authors' prompt file)."""
    return benchmark_options(name, options).deviations()


def action_format_deviation(name: str, action_format: str) -> str | None:
    """The deviation a model playing the benchmark in `action_format` makes from its
    own harness (AppWorld's authors played text ReAct: native tool calling is one),
    from the class attribute `action_format_deviations`; None where it makes none."""
    found = getattr(benchmark_class(name), "action_format_deviations", None) or {}
    return found.get(action_format)


def framing_texts(name: str, framing: str) -> tuple[str, ...]:
    """The texts a memory method's `framing` (its hooks' `prompt_framing`) makes an
    episode of the benchmark read, from the class method `framing_texts(framing)`
    (AppWorld: a port's edit of ACE's prompt, rendered); () for a benchmark that frames
    no prompt. Part of the identity of the evaluate stages of that framing only: a
    framing added later moves no other stage's key."""
    declared = getattr(benchmark_class(name), "framing_texts", None)
    return tuple(declared(framing)) if declared is not None else ()


def context_trims(name: str) -> tuple[str, ...]:
    """The context trims the benchmark's loop offers by name, its own first (its
    conventions' `context_trim`: AppWorld's drop_oldest_steps and blank_then_trim); ()
    for a benchmark that sends its conversation whole. What a memory method's port may
    choose (`ContextChoice`), checked before a run starts."""
    trim = conventions_of(benchmark_class(name)).context_trim
    return trim.names if trim is not None else ()


def known_deviations(name: str) -> tuple[str, ...]:
    """The deviations from its own pipeline that a benchmark's adapter has whatever
    the options (its class attribute `known_deviations`; none by default): recorded
    with every run of it, next to those its options turn on. Not part of episode
    identity: the adapter's fingerprint already covers the code they are in."""
    return tuple(getattr(benchmark_class(name), "known_deviations", ()))


def trajectory_contents(name: str, options: Mapping[str, Any] | None) -> frozenset[str]:
    """What the benchmark's episodes hold for memory methods with these options (its
    class method `trajectory_contents`; tool calls when it declares none). A benchmark
    built on `answering.AnswerBenchmark` grades its closing reply: its episodes hold
    that ANSWER too (said here, not in the answer benchmarks' modules, whose source is
    hashed into their episodes' identity: a declaration changes no episode)."""
    cls = benchmark_class(name)
    declared = getattr(cls, "trajectory_contents", None)
    if declared is None:
        return frozenset({TOOL_CALLS})
    contents = frozenset(declared(benchmark_options(name, options)))
    from distillery.workers.envs.answering import AnswerBenchmark

    if isinstance(cls, type) and issubclass(cls, AnswerBenchmark):
        contents |= {ANSWER}
    return contents


def ground_truth_texts(
    name: str, options: Mapping[str, Any] | None, task_ids: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """Per task, the texts of its hidden ground truth (a gold answer, its test cases)
    that memory written from the task must not hold, from the benchmark's class method
    `ground_truth_texts(options, task_ids)`; a benchmark that declares none has none to
    check (every task maps to ``()``). Read on the driver, never shown to a model."""
    ids = list(task_ids)
    declared = getattr(benchmark_class(name), "ground_truth_texts", None)
    if declared is None:
        return dict.fromkeys(ids, ())
    found = declared(benchmark_options(name, options), ids)
    return {t: tuple(found.get(t, ())) for t in ids}


def same_answer(
    name: str, options: Mapping[str, Any] | None, gold: str, answer: str
) -> bool | None:
    """Whether `answer` states `gold` by the benchmark's own grading (its class method
    `same_answer(options, gold, answer)`); None when it has none (texts are compared).
    Read on the driver (the leakage guard), never shown to a model."""
    declared = getattr(benchmark_class(name), "same_answer", None)
    if declared is None:
        return None
    return declared(benchmark_options(name, options), gold, answer)


def benchmark_counters(name: str) -> tuple[str, ...]:
    """The counters a benchmark's episodes record (`Score.counters`; its class
    attribute `counters`, none by default), summed per evaluation point."""
    return tuple(getattr(benchmark_class(name), "counters", ()))


def summed_benchmark_counters(name: str, records: Iterable[Any]) -> dict[str, float]:
    """Each of the benchmark's `counters`, summed over episode records (their
    `extra_json`; an episode that did not count one counts 0)."""
    names = benchmark_counters(name)
    totals = dict.fromkeys(names, 0.0)
    for record in records:
        if not names:
            break
        try:
            extra = json.loads(getattr(record, "extra_json", None) or "{}")
        except ValueError:
            continue
        for counter in names:
            value = extra.get(counter, 0) if isinstance(extra, dict) else 0
            totals[counter] += float(value) if isinstance(value, (int, float)) else 0.0
    return totals


def make_benchmark(
    name: str, settings: Mapping[str, Any] | BenchmarkOptions | None = None, **runtime: Any
) -> Benchmark:
    """A new adapter: `settings` are its options (config `benchmark.options`), `runtime`
    the other keywords its constructor takes (e.g. BFCL's call `limits`)."""
    cls = benchmark_class(name)
    if not isinstance(settings, cls.options_model):
        if isinstance(settings, BenchmarkOptions):
            raise TypeError(
                f"benchmark {name!r} takes {cls.options_model.__name__}, "
                f"not {type(settings).__name__}"
            )
        settings = cls.options_model.model_validate(dict(settings or {}))
    return cast(Any, cls)(settings=settings, **runtime)
