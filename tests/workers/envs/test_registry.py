"""The benchmark registry: built-ins by "module:Class", loaded lazily; benchmarks of
other packages through the `distillery.benchmarks` entry-point group (a real
distribution on sys.path here); the facts a benchmark owns (options, fingerprint,
groups, versions) reach config validation and stage identity without the orchestrator
naming the benchmark."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.stages import stage as stages
from distillery.workers.envs import registry
from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.conventions import DEFAULT_CONVENTIONS, conventions_of
from distillery.workers.envs.registry import (
    BenchmarkLoadError,
    benchmark_class,
    known_benchmarks,
    make_benchmark,
)
from tests.support import REPO_ROOT

BFCL = "bfcl_multi_turn_base"

TOY_MODULE = """
from distillery.workers.envs.base import BenchmarkOptions, Task
from distillery.workers.envs.conventions import AgentConventions

PROMPT = "Answer the toy."


class ToyOptions(BenchmarkOptions):
    variant: str = "easy"
    n_tasks: int = 6


class ToyBench:
    name = "toy"
    max_steps_per_turn = 4
    groups_are_scenarios = True
    options_model = ToyOptions

    def __init__(self, settings=None, **runtime):
        self.settings = settings or ToyOptions()
        self.runtime = runtime

    @classmethod
    def fingerprint(cls):
        return (PROMPT,)

    @classmethod
    def versions(cls):
        return {"toy-bench": "0.1"}

    def load_tasks(self, limit=None, task_ids=None):
        tasks = [
            Task(f"toy_{i}", "toy", ("hi",), (), (), group_id=f"scenario_{i // 2}")
            for i in range(self.settings.n_tasks)
        ]
        if task_ids is not None:
            tasks = [t for t in tasks if t.task_id in task_ids]
        return tasks[:limit] if limit else tasks

    def make_env(self, task, episode_tag):
        raise NotImplementedError

    def oracle_turns(self, task):
        return [[] for _ in task.turns]


class ToyWithOwnConventions(ToyBench):
    conventions = AgentConventions(step_limit="exceeded")


class ToyWithWrongConventions(ToyBench):
    conventions = {"step_limit": "exceeded"}


NOT_A_BENCHMARK = 42
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A distribution `toy-bench` on sys.path whose entry points register `toy` (the
    class above), `toy_missing` (a module that does not exist), `toy_broken` (a module
    that raises on import) and `toy_number` (not a class). Returns the module's name."""
    module = f"toy_bench_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(TOY_MODULE)
    (site / f"{module}_broken.py").write_text("raise RuntimeError('boom at import')\n")
    info = site / "toy_bench-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-bench\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [distillery.benchmarks]
            toy = {module}:ToyBench
            toy_missing = {module}_nowhere:ToyBench
            toy_broken = {module}_broken:ToyBench
            toy_number = {module}:NOT_A_BENCHMARK
            toy_own = {module}:ToyWithOwnConventions
            toy_wrong = {module}:ToyWithWrongConventions
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    yield module
    for name in (module, f"{module}_broken"):
        sys.modules.pop(name, None)


def _config(*overrides: str):
    base = ["benchmark.limit=6", "methods=[teacher,zero_shot,amd_wf]"]
    return to_config(compose(rewrite_role_overrides([*base, *overrides])))


def _keys(cfg) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key in plan_sweep([cfg]).stages:
        out.setdefault(key.kind, set()).add(key.digest)
    return out


# ------------------------------------------------------------------------- registry


def test_an_entry_point_registers_a_benchmark_loaded_only_when_used(toy):
    assert {BFCL, "toy"} <= set(known_benchmarks())
    assert toy not in sys.modules  # listing (and validating a name) imports nothing
    cls = benchmark_class("toy")
    assert toy in sys.modules
    assert cls.__module__ == toy and cls.versions() == {"toy-bench": "0.1"}
    bench = make_benchmark("toy", {"variant": "hard"}, options="runtime keyword")
    assert bench.settings == cls.options_model(variant="hard")
    assert bench.runtime == {"options": "runtime keyword"}


def test_the_builtin_benchmark_module_is_imported_only_when_used():
    code = textwrap.dedent(
        """
        import sys
        from distillery.workers.envs import registry
        assert "bfcl_multi_turn_base" in registry.known_benchmarks()
        assert "distillery.workers.envs.bfcl" not in sys.modules
        assert "bfcl_eval" not in sys.modules
        cls = registry.benchmark_class("bfcl_multi_turn_base")
        assert "distillery.workers.envs.bfcl" in sys.modules
        assert cls.groups_are_scenarios is False
        print(sorted(cls.versions()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['bfcl-eval']"


def test_an_unknown_name_lists_the_known_ones(toy):
    with pytest.raises(ValueError) as err:
        make_benchmark("nope")
    assert str(err.value).startswith("unknown benchmark 'nope'; known: ")
    known = str(err.value).split("known: ", 1)[1].split(", ")
    assert BFCL in known and "toy" in known
    with pytest.raises(ConfigError) as err:
        _config("benchmark.name=nope")
    assert str(err.value).startswith(
        "invalid config at benchmark.name: unknown benchmark 'nope'; known: "
    )
    assert "toy" in str(err.value)


def test_a_broken_entry_point_is_named(toy):
    with pytest.raises(BenchmarkUnavailable) as err:
        benchmark_class("toy_missing")
    assert f"{toy}_nowhere:ToyBench (entry point toy_missing = " in err.value.what
    assert "of toy-bench) needs module" in err.value.what
    assert err.value.fix == f"install the package that provides {toy}_nowhere"
    with pytest.raises(BenchmarkLoadError) as err:
        benchmark_class("toy_broken")
    assert str(err.value) == (
        f"benchmark 'toy_broken' (entry point toy_broken = '{toy}_broken:ToyBench' of "
        f"toy-bench): {toy}_broken:ToyBench failed to load: RuntimeError: boom at import"
    )
    with pytest.raises(BenchmarkLoadError, match="NOT_A_BENCHMARK is not a Benchmark class"):
        benchmark_class("toy_number")
    # A broken plugin does not break the others, nor naming it in a config.
    assert benchmark_class("toy").name == "toy"
    assert _config("benchmark.name=toy_broken").benchmark.name == "toy_broken"


def test_conventions_are_the_benchmarks_own_or_the_defaults(toy):
    assert conventions_of(make_benchmark("toy")) is DEFAULT_CONVENTIONS
    assert conventions_of(make_benchmark("toy_own")).step_limit == "exceeded"
    with pytest.raises(BenchmarkLoadError) as err:
        benchmark_class("toy_wrong")
    assert str(err.value).endswith(
        f"{toy}:ToyWithWrongConventions.conventions must be an AgentConventions, not dict"
    )


def test_a_name_registered_twice_is_refused(toy, monkeypatch):
    monkeypatch.setitem(registry.BENCHMARKS, "toy", "somewhere.else:Toy")
    with pytest.raises(BenchmarkLoadError) as err:
        benchmark_class("toy")
    assert str(err.value).startswith("benchmark 'toy' is registered more than once: built in; ")
    assert f"entry point toy = '{toy}:ToyBench' of toy-bench" in str(err.value)


def test_a_missing_benchmark_package_is_one_requirement_line(toy, monkeypatch):
    from distillery.orchestrator.planning.requirements_check import missing_requirements

    cfg = _config("benchmark.name=toy_missing", "methods=[teacher]")
    (missing,) = missing_requirements([cfg], services=False)
    assert missing.what.startswith("benchmark=toy_missing: ")
    assert missing.fix == f"install the package that provides {toy}_nowhere"  # no setup.sh


# -------------------------------------------------------------------------- options


def test_options_are_validated_naming_the_key(toy):
    with pytest.raises(ConfigError) as err:
        _config("benchmark.name=toy", "+benchmark.options.varient=hard")
    assert str(err.value) == "invalid config at benchmark.options.varient: unknown key (typo?)"
    with pytest.raises(ConfigError) as err:
        _config("benchmark.name=toy", "+benchmark.options.n_tasks=many")
    assert str(err.value).startswith("invalid config at benchmark.options.n_tasks: Input should")
    with pytest.raises(ConfigError) as err:  # BFCL takes no options (yet)
        _config("+benchmark.options.split=dev")
    assert str(err.value) == "invalid config at benchmark.options.split: unknown key (typo?)"


def test_only_options_off_their_defaults_enter_stage_identity(toy):
    default = _keys(_config("benchmark.name=toy"))
    assert _keys(_config("benchmark.name=toy", "+benchmark.options.variant=easy")) == default
    hard_cfg = _config("benchmark.name=toy", "+benchmark.options.variant=hard")
    hard = _keys(hard_cfg)
    assert hard["collect"].isdisjoint(default["collect"])
    assert hard["evaluate"].isdisjoint(default["evaluate"])
    graph = plan_sweep([hard_cfg])
    collect = next(s for s in graph.stages.values() if s.key.kind == "collect")
    assert collect.identity["benchmark_options"] == {"variant": "hard"}
    # The options reach the benchmark that lists the tasks.
    fewer = plan_sweep([_config("benchmark.name=toy", "+benchmark.options.n_tasks=4")])
    assert sorted(fewer.tasks) == ["toy_0", "toy_1", "toy_2", "toy_3"]


def test_scenario_groups_are_the_benchmarks_fact(toy):
    cfg = _config("benchmark.name=toy", "protocol=cross_split", "methods=[zero_shot]")
    (point,) = plan_sweep([cfg]).points.values()
    group = {f"toy_{i}": i // 2 for i in range(6)}
    memory = {group[t] for t in point.split.memory_ids}
    evaluated = {group[t] for t in point.split.eval_ids}
    assert memory and evaluated and memory.isdisjoint(evaluated)


# ---------------------------------------------------------------------- fingerprint


def _code(node_type: type, benchmark: str) -> dict[str, str]:
    """What an episode stage's code contributes to its key on `benchmark`."""
    return node_type(identity={"benchmark": benchmark}, upstream=(), label="", model=None).code()


def test_a_prompt_change_of_the_benchmark_changes_its_stage_keys(toy, monkeypatch):
    from distillery.workers.envs import bfcl, bfcl_tasks

    before = bfcl.BfclMultiTurnBase.fingerprint()
    code_before = _code(stages.CollectStage, BFCL)
    monkeypatch.setattr(bfcl_tasks, "PYTHON_HINT", bfcl_tasks.PYTHON_HINT + " Really.")
    assert bfcl.BfclMultiTurnBase.fingerprint() != before
    assert _code(stages.EvaluateStage, BFCL) != code_before
    # A benchmark of another package is hashed the same way, by its name in the identity.
    toy_before = _keys(_config("benchmark.name=toy"))
    monkeypatch.setattr(sys.modules[toy], "PROMPT", "Answer the toy, briefly.")
    toy_after = _keys(_config("benchmark.name=toy"))
    assert toy_after["collect"].isdisjoint(toy_before["collect"])
    assert toy_after["evaluate"].isdisjoint(toy_before["evaluate"])


def test_bfcl_default_stage_keys_are_pinned():
    """The digests of the default config. Change these only on purpose: a change
    re-runs every BFCL episode. Last changed by issue 20 (BFCL's own reading of a
    reply, sampling and protections: `bfcl.REPLY_HANDLING` joined the fingerprint, and
    the quickstart student's `cap_every_request`; before: prompts c016abba2dab67d5,
    collect b66ef9eb..., evaluate 2c1f8c21...)."""
    assert _code(stages.CollectStage, BFCL) == {
        "version": "2",
        "prompts": "1ea110038d402bd0",
    }
    default = _keys(to_config(compose(rewrite_role_overrides([]))))
    assert default["collect"] == {
        "b322b1d501cddfb5b5426bccbc13f766b02f735c359d1cafafd01d9a62c2bd3d"
    }
    assert "86c6da551e2d62e87b1066e517544e8258ad92bcff313c192f1b48afbe2d4827" in default["evaluate"]
    explicit = to_config(compose(rewrite_role_overrides(["benchmark.options={}"])))
    assert _keys(explicit) == default
