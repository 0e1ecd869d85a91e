"""The command's words: one error prefix (``error:``), whoever found the
error (click's own usage errors included), and no traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cli


def _actorctl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=60)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--nosuch",), "error: No such option '--nosuch'."),
        (("inspect", "everything"), "error: No such command 'everything'."),
        (("call",), "error: Missing argument 'ADDRESS'."),
        (("cluster", "up", "/nowhere/cluster.toml"), "error: "),
    ],
    ids=["option", "command", "argument", "file"],
)
def test_every_error_says_error_the_same_way(args: tuple[str, ...], said: str) -> None:
    run = _actorctl(*args)
    assert run.returncode == 2, run.stderr
    assert said in run.stderr
    assert "Error:" not in run.stderr
    assert "Traceback" not in run.stderr


def test_a_group_without_its_command_shows_its_help() -> None:
    run = _actorctl("inspect")
    assert run.returncode == 2
    assert run.stderr.startswith("Usage: ")
    assert "Commands:" in run.stderr


def test_help_and_version_exit_0() -> None:
    assert _actorctl("--help").returncode == 0
    version = _actorctl("--version")
    assert version.returncode == 0
    assert "version" in version.stdout


def test_a_client_with_its_own_certificate_is_told_to_name_it(tmp_path: Path) -> None:
    # Given a client's certificate issued by the cluster's CA into its own directory
    # (the README's "a new client joins"), but not named on the command line
    certs, mine = tmp_path / "certs", tmp_path / "carol-certs"
    assert _actorctl("certs", "init", str(certs), "--node", "worker").returncode == 0
    issue = _actorctl("certs", "issue", "carol", "--dir", str(certs), "--out", str(mine))
    assert issue.returncode == 0, issue.stderr
    run = _actorctl(
        "call", "amqps://127.0.0.1:1/primes", "count_below", "10", "--certs", str(mine),
        "--keys", str(tmp_path / "keys"),
    )  # fmt: skip
    # Then the error names the certificate it has and how to use it, not a second CA
    assert run.returncode == 2
    assert f"TLS file {mine}/cli.pem is missing" in run.stderr
    assert "--cert-name carol" in run.stderr
    assert "certs init" not in run.stderr
