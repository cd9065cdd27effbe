"""Building the driver's class-data-sharing archive (make setup): a failed build says why and fails nothing."""

from __future__ import annotations

import pytest

from include.spark import jvm_deps
from include.tooling import jvm_cds_build


def test_a_failed_build_says_why_and_fails_nothing(cds_cache, monkeypatch, capsys):
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "no JVM today"))
    assert jvm_cds_build.build() is None
    err = capsys.readouterr().err
    assert "the training run failed (exit 1; its output ends:" in err and "no JVM today" in err
    assert jvm_cds_build.main([]) == 0
    assert not list((cds_cache / "cds").glob("*.jsa"))


@pytest.mark.parametrize("module", [jvm_cds_build, jvm_deps])
def test_the_setup_commands_answer_help_and_refuse_unknown_options_before_any_work(module, monkeypatch, capsys):
    def work(*_args, **_kwargs):
        raise AssertionError("--help started the work")

    monkeypatch.setattr(jvm_cds_build, "build", work)
    monkeypatch.setattr(jvm_deps, "resolve", work)
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0 and f"usage: python -m {module.__name__}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        module.main(["--force"])
    assert done.value.code == 2 and "unrecognized arguments: --force" in capsys.readouterr().err
