"""The memory method registry: built-ins by "module:Class", loaded lazily; methods of
other packages through the `distillery.memory_methods` entry-point group (a real
distribution on sys.path here). What a method owns (its kind, bank stage, settings,
identities, derived stage) reaches config validation and the stage graph without the
orchestrator naming the method."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.memory import registry
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.registry import (
    MemoryMethodLoadError,
    builtin_hook_texts,
    known_methods,
    memory_method,
)
from tests.support import REPO_ROOT

TOY_MODULE = """
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.method import StudentRunsMethod

HINT = "Toy memory says hi."


@dataclass(frozen=True)
class Note:
    memory_id: str
    source: MemorySource
    text: str

    @property
    def key_text(self):
        return self.text


class ToySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    types: tuple[str, ...] = ("notes",)
    k_notes: int = Field(2, ge=1)
    derived: bool = False


class ToyMemory(StudentRunsMethod):  # its bank: the student's own runs, built
    kind = "toy_memory"
    settings_model = ToySettings
    code_version = "1"
    collections = (CollectionSpec("notes", Note),)
    store_prefix = "toymemory"

    def settings(self, defaults, overrides, types):
        # Shared AMD-shaped defaults are not this method's: it reads its own only.
        data = dict(overrides)
        if types is not None:
            data["types"] = types
        return ToySettings.model_validate(data)

    def read_identity(self, settings):
        return {"k_notes": settings.k_notes}

    def build_identity(self, memory):
        return {"toy": True}

    def build_fingerprint(self):
        return "toy-builders-" + self.code_version

    def bank_id(self, episodes, memory, writer, split):
        return "toy-bank"

    async def build(self, episodes, tasks, builder, llm, split):
        raise NotImplementedError

    async def render(self, bank, builder, llm):
        raise NotImplementedError

    def hook_texts(self):
        return (HINT,)

    def derived_stage(self, settings):
        return settings.derived

    def hooks(self, task, search, settings, allows, ask_model):
        raise NotImplementedError

    def metrics(self, records):
        return {}

    def tags(self, settings, embedder):
        return {"memory_types": "notes", "k_notes": str(settings.k_notes)}

    def report_columns(self, settings):
        return {"memory_types": "notes", "k_notes": settings.k_notes}

    def label(self, settings):
        return f"notes k={settings.k_notes}"

    def descriptors(self, settings):
        return {"k_notes": str(settings.k_notes)}


class WrongKind(ToyMemory):
    kind = "something_else"


NOT_A_METHOD = 42
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    module = _install_toy(tmp_path, monkeypatch)
    yield module
    for name in (module, f"{module}_broken"):
        sys.modules.pop(name, None)


def _install_toy(tmp_path, monkeypatch) -> str:
    """A distribution `toy-memory` on sys.path whose entry points register `toy_memory`
    (the class above), `toy_missing` (a module that does not exist), `toy_broken` (a
    module that raises on import), `toy_number` (not a class) and `toy_wrong` (a class
    that says another kind). Returns the module's name."""
    module = f"toy_memory_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(TOY_MODULE)
    (site / f"{module}_broken.py").write_text("raise RuntimeError('boom at import')\n")
    info = site / "toy_memory-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-memory\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [distillery.memory_methods]
            toy_memory = {module}:ToyMemory
            toy_missing = {module}_nowhere:ToyMemory
            toy_broken = {module}_broken:ToyMemory
            toy_number = {module}:NOT_A_METHOD
            toy_wrong = {module}:WrongKind
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    return module


def _config(*overrides: str):
    base = ["benchmark.limit=6", "teacher=gpt5_mini"]
    return to_config(compose(rewrite_role_overrides([*base, *overrides])))


TOY_CATALOG = [
    "+method_catalog.toy={kind: toy_memory, retrieval: {k_notes: 3}}",
    "methods=[zero_shot,toy]",
]


def test_an_entry_point_registers_a_method_loaded_only_when_used(toy):
    assert {"amd", "student_memory", "toy_memory"} <= set(known_methods())
    assert toy not in sys.modules  # listing (and validating a kind) imports nothing
    method = memory_method("toy_memory")
    assert toy in sys.modules
    assert isinstance(method, MemoryMethod)
    assert type(method).__module__ == toy and registry.bank_origin("toy_memory") == "student"
    assert memory_method("toy_memory") is method  # one instance per kind


def test_the_builtin_methods_are_imported_only_when_used():
    code = textwrap.dedent(
        """
        import sys
        from distillery.workers.memory import registry
        assert {"amd", "student_memory"} <= set(registry.known_methods())
        assert "distillery.workers.memory.amd.method" not in sys.modules
        amd = registry.memory_method("amd")
        student = registry.memory_method("student_memory")
        assert "distillery.workers.memory.amd.method" in sys.modules
        print(registry.bank_origin("amd"), registry.bank_origin("student_memory"))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "teacher student"


def test_a_plugin_method_is_planned_from_what_it_says(toy):
    """Its bank_stage picks the source stage (the student's zero-shot runs here), its
    build identity and fingerprint make the build key, its read identity the evaluate
    key; the zero_shot stage is shared with the zero_shot method."""
    cfg = _config(*TOY_CATALOG)
    graph = plan_sweep([cfg])
    kinds = [key.kind for key in graph.stages]
    assert kinds == ["evaluate", "build", "evaluate"]  # no collect: nothing reads it
    zero_shot, build, evaluate = graph.stages.values()
    assert build.upstream == (zero_shot.key,) and build.identity["builder"] == {"toy": True}
    assert evaluate.identity["method"] == "toy_memory"
    assert evaluate.identity["retrieval"] == {"k_notes": 3}
    assert evaluate.label.endswith("toy (notes k=3)")
    read = evaluate.memory
    assert read.kind == "toy_memory" and read.bank_stage == build.key
    assert graph.bank_sources[build.key].origin == "student"
    # A changed builder fingerprint is a new bank; a derived stage is planned on request.
    derived = plan_sweep(
        [
            _config(
                "+method_catalog.toy={kind: toy_memory, retrieval: {derived: true}}",
                "methods=[toy]",
            )
        ]
    )
    assert [key.kind for key in derived.stages] == ["evaluate", "build", "render", "evaluate"]
    cls = type(memory_method("toy_memory"))
    before = {k for k in graph.stages if k.kind == "build"}
    cls.code_version = "2"
    try:
        after = {k for k in plan_sweep([_config(*TOY_CATALOG)]).stages if k.kind == "build"}
    finally:
        cls.code_version = "1"
    assert before.isdisjoint(after)


def test_a_plugin_method_validates_its_own_settings(toy):
    with pytest.raises(ConfigError) as err:
        _config("+method_catalog.toy={kind: toy_memory, retrieval: {k_notes: 0}}", "methods=[toy]")
    assert str(err.value).startswith("invalid config at method_catalog.toy.retrieval.k_notes: ")


def test_an_unknown_kind_lists_the_known_ones(toy):
    with pytest.raises(ValueError) as err:
        memory_method("nope")
    assert str(err.value).startswith("unknown memory method 'nope'; known: ")
    known = str(err.value).split("; known: ")[1].split(", ")
    assert known == sorted(known) and {"amd", "student_memory", "toy_memory"} <= set(known)
    with pytest.raises(ConfigError) as err:
        _config("+method_catalog.bad={kind: nope}", "methods=[bad]")
    message = str(err.value)
    assert message.startswith(
        "invalid config at method_catalog.bad.kind: unknown method kind 'nope'; known: "
        "zero_shot, teacher, "
    )
    assert "amd" in message and "toy_memory" in message


def test_a_broken_entry_point_is_named(toy):
    with pytest.raises(MemoryMethodLoadError) as err:
        memory_method("toy_missing")
    assert str(err.value).startswith(
        f"memory method 'toy_missing' (entry point toy_missing = '{toy}_nowhere:ToyMemory' "
        f"of toy-memory): {toy}_nowhere:ToyMemory failed to load: ModuleNotFoundError"
    )
    with pytest.raises(MemoryMethodLoadError) as err:
        memory_method("toy_broken")
    assert str(err.value) == (
        f"memory method 'toy_broken' (entry point toy_broken = '{toy}_broken:ToyMemory' of "
        f"toy-memory): {toy}_broken:ToyMemory failed to load: RuntimeError: boom at import"
    )
    with pytest.raises(MemoryMethodLoadError, match="NOT_A_METHOD is not a MemoryMethod class"):
        memory_method("toy_number")
    with pytest.raises(MemoryMethodLoadError, match="says its kind is 'something_else'"):
        memory_method("toy_wrong")
    # A broken plugin does not break the others.
    assert memory_method("toy_memory").kind == "toy_memory"


def test_a_kind_registered_twice_is_refused(toy, monkeypatch):
    monkeypatch.setitem(registry.MEMORY_METHODS, "toy_memory", "somewhere.else:Toy")
    with pytest.raises(MemoryMethodLoadError) as err:
        memory_method("toy_memory")
    assert str(err.value).startswith(
        "memory method 'toy_memory' is registered more than once: built in; "
    )
    assert f"entry point toy_memory = '{toy}:ToyMemory' of toy-memory" in str(err.value)


def test_a_plugin_does_not_change_the_keys_of_shipped_methods(tmp_path, monkeypatch):
    """Only the project's own methods' hook texts are in every episode key: installing
    and loading a plugin method keeps the keys of configs that do not use it."""
    shipped = ["methods=[teacher,zero_shot,amd_wf_st_fn,student_memory]"]
    before = set(plan_sweep([_config(*shipped)]).stages)
    module = _install_toy(tmp_path, monkeypatch)
    try:
        memory_method("toy_memory")
        assert "Toy memory says hi." not in builtin_hook_texts()
        assert set(plan_sweep([_config(*shipped)]).stages) == before
    finally:
        sys.modules.pop(module, None)
