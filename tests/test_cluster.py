"""`kaas compile` on a real Ray cluster (the `cluster` setting, compile/cluster.py): the same
corpus compiled in-process and on Ray gives a byte-identical wiki, manifest and call count; a
driver SIGKILLed at a named fault point leaves a wiki the next compile completes exactly as an
uninterrupted run; the default compile never imports Ray.

The Ray tests share one local cluster (``ray.init(num_cpus=2, include_dashboard=False)``, started
once, ~10-25 s on a loaded 2-core machine), are marked slow, and skip when Ray is not installed,
except under CI=true, where a missing Ray fails them. No mock of Ray."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compile_checks import assert_consistent, make_source_kb, manifest, wiki_snapshot
from helpers import fault_spec
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings, load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_compile_concurrency import SlowModel  # noqa: E402  (a fake model over real loopback HTTP)

TESTS = str(Path(__file__).resolve().parent)
KAAS = str(Path(sys.executable).with_name("kaas"))
HAVE_RAY = importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for every test here; its address, for `kaas compile` subprocesses."""
    if not HAVE_RAY:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but Ray is not installed: pip install -e '.[test]' installs it")
        pytest.skip("Ray is not installed (pip install -e '.[cluster]'): the cluster tests need a real Ray")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def fake_model():
    model = SlowModel(0.0)
    return model, model.start()


def _model_settings(api_base: str, **extra) -> dict:
    return dict(model="openai/bench-model", api_base=api_base, api_key="sk-test", cache=False, concurrency=2,
                **extra)


def _same_manifest(a: Path, b: Path) -> None:
    first, second = manifest(a), manifest(b)
    for m in (first, second):
        m.pop("compiled_at", None)
    assert first == second


def _twins(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "in-process", tmp_path / "on-ray"
    make_source_kb(a)
    shutil.copytree(a, b)
    return a, b


def test_the_cluster_setting_is_read_from_kaas_toml_and_the_environment(tmp_path):
    (tmp_path / "kaas.toml").write_text('cluster = "local"\n', encoding="utf-8")
    assert load_settings(tmp_path, env={}).cluster == "local"
    assert load_settings(tmp_path, env={"KAAS_CLUSTER": "ray://head:10001"}).cluster == "ray://head:10001"
    assert load_settings(tmp_path / "none", env={}).cluster is None


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    full["PYTHONPATH"] = TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")
    full.update(env)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=full)


def test_a_default_compile_never_imports_ray(tmp_path):
    make_source_kb(tmp_path)
    out = _run(f"""
import sys
from compile_checks import compile_offline
report = compile_offline(__import__("pathlib").Path({str(tmp_path)!r}))
print(len(report.created) > 0, "ray" in sys.modules, "kb_ai.compile.cluster" in sys.modules)
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False"]


def test_the_cluster_setting_without_ray_installed_is_a_clear_error(tmp_path):
    make_source_kb(tmp_path)
    out = _run(f"""
import sys
sys.modules["ray"] = None  # as if Ray were not installed
from click.testing import CliRunner
from kb_ai.cli.commands import cli
result = CliRunner().invoke(cli, ["compile", "--kb", {str(tmp_path)!r}])
print(result.exit_code)
print(result.output)
""", KAAS_CLUSTER="local")
    assert out.returncode == 0, out.stderr
    code, text = out.stdout.split("\n", 1)
    assert code == "2"
    assert "needs Ray: pip install 'kaas[cluster]'" in text
    assert not (tmp_path / "wiki" / "master-index.md").exists()  # nothing compiled half-way


@pytest.mark.slow
def test_offline_compile_on_ray_is_byte_identical_to_in_process(tmp_path, ray_cluster):
    a, b = _twins(tmp_path)
    first = run_compile(Settings(kb=a), progress=False)
    second = run_compile(Settings(kb=b, cluster="local", concurrency=2), progress=False)
    assert any(n.startswith("ran on the Ray cluster 'local': ") for n in second.notes), second.notes
    assert wiki_snapshot(a) == wiki_snapshot(b) and len(wiki_snapshot(a)) > 5
    _same_manifest(a, b)
    assert (first.created, first.failed, first.held) == (second.created, second.failed, second.held)
    assert_consistent(b)


@pytest.mark.slow
def test_model_compile_on_ray_is_byte_identical_with_the_same_calls(tmp_path, ray_cluster, fake_model):
    model, api_base = fake_model
    a, b = _twins(tmp_path)
    before = model.calls
    first = run_compile(Settings(kb=a, **_model_settings(api_base)), progress=False)
    in_process = model.calls - before
    second = run_compile(Settings(kb=b, cluster="local", **_model_settings(api_base)), progress=False)
    on_ray = model.calls - before - in_process
    assert in_process == on_ray == first.usage["llm_calls"] == second.usage["llm_calls"] > 0
    assert not second.failed
    assert wiki_snapshot(a) == wiki_snapshot(b)
    _same_manifest(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["compile.plan.after_record", "compile.write.before_file",
                                   "compile.write.after_file"])
def test_a_driver_killed_at_a_fault_point_resumes_to_the_uninterrupted_wiki(tmp_path, ray_cluster, fake_model,
                                                                           point):
    """`kaas compile` (its own process, on the shared cluster by address) SIGKILLed at ``point``;
    the next compile completes the wiki exactly as an uninterrupted one, with the same calls."""
    model, api_base = fake_model
    clean, killed = _twins(tmp_path)
    before = model.calls
    run_compile(Settings(kb=clean, **_model_settings(api_base)), progress=False)
    uninterrupted = model.calls - before
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env.update(KAAS_MODEL="openai/bench-model", KAAS_API_BASE=api_base, KAAS_API_KEY="sk-test", KAAS_CACHE="true",
               KAAS_CONCURRENCY="2", KAAS_CLUSTER=ray_cluster, KAAS_FAULT=fault_spec(point, 3))
    died = subprocess.run([KAAS, "compile", "--kb", str(killed)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert died.returncode == -9, died.stderr[-2000:]
    env.pop("KAAS_FAULT")
    resumed = subprocess.run([KAAS, "compile", "--json", "--kb", str(killed)], capture_output=True, text=True,
                             env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    notes = json.loads(resumed.stdout)["notes"]
    assert any(n.startswith(f"ran on the Ray cluster {ray_cluster!r}: ") for n in notes), notes
    assert wiki_snapshot(killed) == wiki_snapshot(clean)
    _same_manifest(killed, clean)
    assert_consistent(killed)
    # The reply cache (on, as by default) makes the rerun pay only for the calls the kill lost
    # (at most the calls then in flight: concurrency 2).
    assert uninterrupted <= model.calls - before - uninterrupted <= uninterrupted + 2
