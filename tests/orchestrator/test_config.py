import pytest
from hydra import compose, initialize_config_module

from distillery.orchestrator.core.compose import rewrite_role_overrides
from distillery.orchestrator.core.config import ConfigError, to_config


def _compose(*overrides: str):
    with initialize_config_module(config_module="distillery.conf", version_base=None):
        return compose(config_name="config", overrides=rewrite_role_overrides(list(overrides)))


def test_defaults_are_the_quickstart():
    cfg = to_config(_compose())
    assert cfg.experiment.name == "quickstart"
    assert cfg.teacher.backend == "oracle"
    assert cfg.student.backend == "llama_cpp"
    assert cfg.benchmark.name == "bfcl_multi_turn_base"
    assert cfg.benchmark.limit == 2
    assert cfg.methods == ("teacher", "zero_shot", "amd_wf_st_fn")
    assert cfg.protocol.name == "self_excluded"


def test_role_overrides_select_model_configs():
    cfg = to_config(_compose("student=qwen3_4b", "teacher=gpt5_mini", "benchmark.limit=7"))
    assert cfg.student.model == "Qwen/Qwen3-4B"
    assert cfg.student.backend == "vllm"
    assert cfg.teacher.api_key_env == "OPENAI_API_KEY"
    assert cfg.benchmark.limit == 7


def test_external_endpoint_contract():
    cfg = to_config(
        _compose(
            "student.backend=external",
            "student.base_url=http://127.0.0.1:9/v1",
            "student.model=my-model",
            "student.api_key_env=MY_KEY",
        )
    )
    assert cfg.student.backend == "external"
    assert cfg.student.base_url == "http://127.0.0.1:9/v1"
    assert cfg.student.api_key_env == "MY_KEY"


def test_rewrite_only_touches_role_groups():
    argv = ["student=a,b", "student.model=x", "+teacher=y", "benchmark.limit=2"]
    assert rewrite_role_overrides(argv) == [
        "model@student=a,b",
        "student.model=x",
        "+model@teacher=y",
        "benchmark.limit=2",
    ]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("benchmark.limit=0", "benchmark.limit"),
        ("student.temperature=5", "student.temperature"),
        ("student.backend=warp_drive", "student.backend"),
        ("benchmark.name=nope", "benchmark.name"),
        ("cluster.num_workers=0", "cluster.num_workers"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        to_config(_compose(override))
    assert str(err.value).startswith(f"invalid config at {key}")


def test_typo_is_an_unknown_key():
    with pytest.raises(ConfigError, match=r"student.temprature: unknown key"):
        to_config(_compose("+student.temprature=0.3"))


def test_external_without_url_fails_naming_student():
    with pytest.raises(ConfigError, match=r"^invalid config at student: .*base_url"):
        to_config(_compose("student.backend=external", "student.model=m"))


def test_external_group_requires_url():
    with pytest.raises(ConfigError, match=r"student"):
        to_config(_compose("student=external"))


def test_whole_config_checks_name_their_key():
    with pytest.raises(ConfigError, match=r"^invalid config at methods: unknown method 'bogus'"):
        to_config(_compose("methods=[teacher,bogus]"))
    with pytest.raises(ConfigError, match=r"^invalid config at memory.builder.model"):
        to_config(_compose("memory.builder.model=ghost"))
    bad_k = "+method_catalog.k0={kind: amd, retrieval: {k_st: 0}}"
    with pytest.raises(ConfigError, match=r"method_catalog.k0.retrieval"):
        to_config(_compose(bad_k, "methods=[k0]"))


def test_read_settings_are_each_methods_own_and_errors_name_where_they_were_set():
    """memory.retrieval holds shared defaults (AMD's today), validated by the methods
    that read them (memory/config.py names no method); an error names its key."""
    from pathlib import Path

    import distillery.workers.memory.config as memory_config
    from distillery.workers.memory.amd.settings import RetrievalConfig

    assert "memory.amd" not in Path(memory_config.__file__).read_text()  # no AMD import
    cfg = to_config(_compose("memory.retrieval.k_st=3", "methods=[amd_wf_st]"))
    settings = cfg.retrieval_for("amd_wf_st")
    assert isinstance(settings, RetrievalConfig)
    assert (settings.k_st, settings.types) == (3, ("wf", "st"))
    # A bad shared default names memory.retrieval, even where no selected method reads it.
    with pytest.raises(ConfigError, match=r"^invalid config at memory\.retrieval\.k_st: "):
        to_config(_compose("memory.retrieval.k_st=0", "methods=[amd_wf_st]"))
    with pytest.raises(ConfigError, match=r"^invalid config at memory\.retrieval\.k_sst: unknown"):
        to_config(_compose("+memory.retrieval.k_sst=3", "methods=[zero_shot]"))
    # An entry's own override names the entry; its types too.
    entry = "+method_catalog.mine={kind: amd, types: [wf], retrieval: {k_wf: 99}}"
    with pytest.raises(
        ConfigError, match=r"^invalid config at method_catalog\.mine\.retrieval\.k_wf"
    ):
        to_config(_compose(entry, "methods=[mine]"))
    typo = "+method_catalog.mine={kind: amd, types: [wf, xx]}"
    with pytest.raises(ConfigError, match=r"^invalid config at method_catalog\.mine\.types"):
        to_config(_compose(typo, "methods=[mine]"))


def test_each_method_ships_its_catalog_entries_in_its_own_file():
    """AMD's entries live in conf/method_catalog/amd.yaml, composed with config.yaml's
    own; every shipped way of naming them keeps working."""
    from pathlib import Path

    import distillery.conf

    conf = Path(distillery.conf.__file__).parent
    assert "kind: amd," not in (conf / "config.yaml").read_text().split("method_catalog:\n", 1)[1]
    assert "amd_wf_st_fn:" in (conf / "method_catalog" / "amd.yaml").read_text()
    cfg = to_config(_compose("methods=[amd_wf_st_fn,student_memory]", "memory.retrieval.k_st=3"))
    assert cfg.method("amd_wf_st_fn").types == ("wf", "st", "fn")
    assert cfg.retrieval_for("amd_wf_st_fn").k_st == 3
    from distillery.workers.memory.registry import bank_origin

    assert bank_origin(cfg.method("student_memory").kind) == "student"
    edited = to_config(_compose("method_catalog.amd_wf.types=[st]", "methods=[amd_wf]"))
    assert edited.method("amd_wf").types == ("st",)


def test_a_plugin_package_ships_its_own_catalog_entries(tmp_path, monkeypatch):
    """A method of another package adds its entries with one file of its config package
    (method_catalog/<method>.yaml), found through its distillery.conf entry point."""
    import sys

    from distillery.orchestrator.core.compose import compose as cli_compose
    from distillery.workers.memory import registry
    from tests.plugins import ENTRY_POINTS, install_toy_plugin

    site = tmp_path / "site"
    catalog = site / "recall_conf" / "method_catalog"
    catalog.mkdir(parents=True)
    (site / "recall_conf" / "__init__.py").write_text("")
    (catalog / "toy_recall.yaml").write_text(
        "# @package method_catalog\nrecall_k3: {kind: toy_recall, retrieval: {k: 3}}\n"
    )
    groups = {**ENTRY_POINTS, "distillery.conf": {"recall": "recall_conf"}}
    for path in reversed(install_toy_plugin(site, groups)):
        monkeypatch.syspath_prepend(path)
    try:
        overrides = rewrite_role_overrides(["methods=[recall_k3,amd_wf]", "teacher=gpt5_mini"])
        cfg = to_config(cli_compose(overrides))
        assert cfg.retrieval_for("recall_k3").k == 3
        assert cfg.method("amd_wf").types == ("wf",)  # distillery's own files still compose
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in ("toy_plugin", "recall_conf")]:
            sys.modules.pop(name, None)
        registry._load.cache_clear()
