"""`frachub up` and scripts/up.sh (the README's first command) as commands: what they write,
and their refusals as one line without a traceback."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from hub.upharness import SERVICE_API, Up
from hub_ext.cli.main import main as up_main
from hub_ext.cli.up.options import find_proxy, is_python_proxy

REPO = Path(__file__).resolve().parents[2]
FRACHUB = [sys.executable, "-m", "hub_ext.cli"]


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_up_sh_help_installs_nothing(tmp_path: Path) -> None:
    """--help answers with the system's Python before any virtualenv or npm install."""
    venv = tmp_path / "venv"
    result = run(["bash", "scripts/up.sh", "--demo", "--help"], env={"FRACHUB_VENV": str(venv)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: bash scripts/up.sh")
    assert "--demo" in result.stdout and "--stop-jobs" in result.stdout
    assert not venv.exists()


def test_write_config_only_writes_both_files_from_the_flags(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run(
        [
            *FRACHUB,
            "up",
            "--demo",
            "--declared",
            "--gpus",
            "4",
            "--data-dir",
            str(data),
            "--write-config-only",
            "--password",
            "a-long-password",
        ]
    )
    assert result.returncode == 0, result.stderr
    hub = (data / "jupyterhub_config.py").read_text()
    service = (data / "frachub_config.py").read_text()
    compile(hub, "jupyterhub_config.py", "exec")
    compile(service, "frachub_config.py", "exec")
    assert "configure(" in hub
    # the password is read from its 0600 file, never written into the config
    assert "a-long-password" not in hub
    assert (data / "password").read_text().strip() == "a-long-password"
    for private in ("password", "jupyterhub_config.py", "frachub_config.py", "frachub.sqlite"):
        assert (data / private).stat().st_mode & 0o777 == 0o600, private
    assert data.stat().st_mode & 0o777 == 0o700
    assert "'vision', 'deserved_gpus': 2.0" in service
    assert "'nlp', 'deserved_gpus': 2.0" in service
    assert "'gpus': 4" in service
    assert "jupyterhub -f" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--declared", "--gpus", "0"], "frachub up: --gpus must be at least 1"),
        (["--declared", "--gpu-memory-gib", "-1"], "frachub up: --gpu-memory-gib must be positive"),
        (
            ["--auth", "shared-password", "--password", "short"],
            "frachub up: --password must have at least 8 characters",
        ),
        (["--ssl-cert", "/nonexistent.pem"], "frachub up: --ssl-cert and --ssl-key go together"),
        (
            ["--ssl-cert", "/nonexistent.pem", "--ssl-key", "/nonexistent.key"],
            "frachub up: --ssl-cert /nonexistent.pem: not a readable file",
        ),
        (["--projects", "/nonexistent.yaml"], "frachub up: --projects /nonexistent.yaml: No such"),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'LOUD'"),
        (["--port", "many"], "argument --port: invalid int value: 'many'"),
    ],
)
def test_bad_flags_get_one_line_and_no_traceback(tmp_path: Path, argv, message) -> None:
    result = run([*FRACHUB, "up", "--data-dir", str(tmp_path), "--write-config-only", *argv])
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def proxies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, node: bool, python: bool
) -> tuple[Path, Path]:
    """A PATH holding Node's configurable-http-proxy or not, and an interpreter's scripts
    directory holding the Python one or not (what ``frachub[hub]`` installs there)."""
    on_path, scripts = tmp_path / "node-bin", tmp_path / "venv-bin"
    for directory, present, first in (
        (on_path, node, "#!/usr/bin/env node"),
        (scripts, python, "#!/venv/bin/python"),
    ):
        directory.mkdir()
        if present:
            proxy = directory / "configurable-http-proxy"
            proxy.write_text(f"{first}\n")
            proxy.chmod(0o755)
    monkeypatch.setenv("FRACHUB_CHP", "")
    monkeypatch.setenv("FRACHUB_NPM_PREFIX", str(tmp_path / "no-npm"))
    monkeypatch.setenv("PATH", f"{on_path}{os.pathsep}{scripts}")
    monkeypatch.setattr(sysconfig, "get_path", lambda name, *args, **kwargs: str(scripts))
    return on_path / "configurable-http-proxy", scripts / "configurable-http-proxy"


def test_missing_proxy_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Advice a wheel user can follow first (the ``hub`` extra), then Node's."""
    proxies(monkeypatch, tmp_path, node=False, python=False)
    assert up_main(["up", "--data-dir", str(tmp_path / "data")]) == 2
    error = capsys.readouterr().err
    assert "configurable-http-proxy is not installed: `pip install 'frachub[hub]'`" in error
    assert "`npm install -g configurable-http-proxy`" in error


def test_nodes_proxy_first_then_the_python_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    node, python = proxies(monkeypatch, tmp_path, node=True, python=True)
    assert find_proxy() == str(node)  # even with the interpreter's bin/ on PATH
    assert not is_python_proxy(str(node))
    node.unlink()
    assert find_proxy() == str(python)
    assert is_python_proxy(str(python))


def test_tls_with_the_python_proxy_asks_for_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxies(monkeypatch, tmp_path, node=False, python=True)
    pem = tmp_path / "tls.pem"
    pem.write_text("")
    argv = ["up", "--data-dir", str(tmp_path / "data"), "--ssl-cert", str(pem)]
    assert up_main([*argv, "--ssl-key", str(pem)]) == 2
    error = capsys.readouterr().err
    assert "--ssl-cert needs Node's configurable-http-proxy" in error
    assert "`npm install -g configurable-http-proxy`" in error


def test_the_python_proxy_waits_as_long_as_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without --proxy-timeout 0 the Python proxy answers 503 to a request over 20 s."""
    node, python = proxies(monkeypatch, tmp_path, node=True, python=True)
    argv = ["up", "--demo", "--declared", "--write-config-only"]
    assert up_main([*argv, "--data-dir", str(tmp_path / "node")]) == 0
    config = (tmp_path / "node" / "jupyterhub_config.py").read_text()
    assert f"c.ConfigurableHTTPProxy.command = [{str(node)!r}]" in config
    node.unlink()
    assert up_main([*argv, "--data-dir", str(tmp_path / "python")]) == 0
    config = (tmp_path / "python" / "jupyterhub_config.py").read_text()
    assert f"[{str(python)!r}, '--proxy-timeout', '0']" in config


def test_notebooks_and_jobs_share_one_home_per_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run(
        [*FRACHUB, "up", "--demo", "--declared", "--data-dir", str(data), "--write-config-only"]
    )
    assert result.returncode == 0, result.stderr
    home = repr(str(data.resolve() / "home" / "{username}"))
    assert (
        f"c.FracLocalSpawner.home_dir_template = {home}"
        in (data / "jupyterhub_config.py").read_text()
    )
    assert f"c.LocalBackend.home_dir_template = {home}" in (data / "frachub_config.py").read_text()
    assert "GPUs: 2 declared GPUs of 24 GiB (--declared)" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="PAM mode is for root (CI runs as root)")
def test_a_team_with_system_accounts_from_a_projects_file(tmp_path: Path) -> None:
    projects = tmp_path / "projects.yaml"
    projects.write_text(
        "- {name: vision, deserved_gpus: 1, members: [root, daemon]}\n"
        "- {name: open, deserved_gpus: 1, members: ['*']}\n"
    )
    data = tmp_path / "data"
    argv = [*FRACHUB, "up", "--declared", "--data-dir", str(data), "--write-config-only"]
    result = run([*argv, "--projects", str(projects), "--admin", "root", "--admin", "ghost-x"])
    assert result.returncode == 0, result.stderr
    assert "no system account 'ghost-x'" in result.stderr
    hub = (data / "jupyterhub_config.py").read_text()
    service = (data / "frachub_config.py").read_text()
    assert "c.JupyterHub.authenticator_class = 'pam'" in hub
    assert "'vision': {'users': ['root', 'daemon']}" in hub
    assert "'frachub-admins': {'users': ['root', 'ghost-x']}" in hub
    assert "c.Authenticator.admin_users = {" in hub and "home_dir_template" not in hub
    assert "c.LocalBackend.run_as_user = True" in service
    # named members live in the hub's groups (editable on the admin page), "*" in the queue
    assert "{'name': 'vision', 'deserved_gpus': 1}" in service
    assert "{'name': 'open', 'deserved_gpus': 1, 'members': ['*']}" in service
    assert data.stat().st_mode & 0o777 == 0o711

    nobody = run([*argv, "--auth", "pam"])
    assert nobody.returncode == 2 and "name who may log in: --admin NAME" in nobody.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name: vision\n", "--projects {} must be a list of projects"),
        ("- [vision]\n", "--projects {}[0] must be a dict"),
        ("- {name: a, members: bob}\n", "--projects {}[0].members must be a list of names"),
        ("- {name: a, deserved_gpus: -1}\n", "deserved_gpus"),
        ("- {name: a\n", "--projects {}: not YAML or JSON"),
    ],
)
def test_a_bad_projects_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    projects = tmp_path / "projects.yaml"
    projects.write_text(content)
    argv = [*FRACHUB, "up", "--declared", "--data-dir", str(tmp_path / "d"), "--write-config-only"]
    result = run([*argv, "--auth", "shared-password", "--projects", str(projects)])
    assert result.returncode == 2
    assert message.format(projects) in result.stderr
    assert "Traceback" not in result.stderr


def test_a_quiet_start_and_ctrl_c_says_what_keeps_running(tmp_path: Path) -> None:
    """No proxy 404s, ECONNREFUSED traces or 403 warnings while the hub starts; the banner and
    the login page say that everything runs as one account, and name the demo's users; Ctrl-C
    (SIGINT to frachub up alone, as a terminal sends it) names the job that keeps running and
    how to stop it; the next start adopts it, and with --stop-jobs Ctrl-C cancels it first."""
    up = Up(tmp_path, grace_period=1).start()
    try:
        started = up.log_text()
        assert "404 GET" not in started and "ECONNREFUSED" not in started, started[-3000:]
        assert "403 GET" not in started and "WARNING" not in started, started[-3000:]
        service = f"http://127.0.0.1:{up.ports['--service-port']}/services/frachub/"
        assert f"listening on {service}\n" in started
        account = pwd.getpwuid(os.geteuid()).pw_name
        assert (
            f"  runs as:  {account}: every notebook, terminal and job of every user runs as this "
            "one Unix account" in started
        )
        login = httpx.get(f"{up.url}/hub/login", timeout=30).text
        assert "Demo users: <b>alice</b>, <b>bob</b>, <b>carol</b>, <b>admin</b>" in login
        assert f"runs as the Unix account <code>{account}</code>, for every user" in login
        alice = up.client("alice")
        job = alice.post(
            f"{SERVICE_API}workloads", json={"command": "sleep 300", "gpus": 0.5, "name": "stays"}
        ).json()["id"]
        deadline = time.monotonic() + 60
        while alice.get(f"{SERVICE_API}workloads/{job}").json()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert up.proc is not None
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(60) == 0
        said = up.log_text()
        assert f"job {job} (stays) of alice, running on" in said
        assert "1 job keeps running without FracHub" in said
        assert "--stop-jobs" in said and "Traceback" not in said

        up.flags = (*up.flags, "--stop-jobs")
        up.start()
        adopted = up.admin_service().get(f"workloads/{job}").json()
        assert adopted["state"] == "running", adopted
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(60) == 0
        said = up.log_text()
        assert "frachub up: cancelling 1 job (--stop-jobs" in said
        assert said.rstrip().endswith("no training jobs were running or waiting.")
    finally:
        up.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="PAM mode is for root (CI runs as root)")
def test_the_team_mode_refuses_an_interpreter_its_users_cannot_run(tmp_path: Path) -> None:
    """The hub's Python in a virtualenv under a root-owned 0700 directory (as with Python
    installed in root's home): `frachub up --auth pam` refuses to start, naming the directory
    and the fix, instead of every spawn failing with an HTTP 500."""
    outer = Path(tempfile.mkdtemp(prefix="frachub-up-", dir="/tmp"))  # tmp_path is 0700
    try:
        outer.chmod(0o755)
        hidden = outer / "hidden"
        hidden.mkdir(mode=0o700)
        venv = hidden / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--symlinks", str(venv)], check=True
        )
        # this environment's packages and the checkout, seen from the new virtualenv
        site = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        here = [p for p in sys.path if p.endswith("site-packages")]
        Path(site, "frachub-test.pth").write_text("\n".join([str(REPO), *here]) + "\n")
        (venv / "bin" / "jupyterhub-singleuser").symlink_to(
            Path(sys.executable).parent / "jupyterhub-singleuser"
        )
        argv = [str(venv / "bin" / "python"), "-m", "hub_ext.cli", "up", "--auth", "pam"]
        argv += ["--admin", "nobody", "--declared", "--data-dir", str(tmp_path / "data")]
        result = run(argv, env={"FRACHUB_CHP": "/bin/true"})
        assert result.returncode == 2, result.stderr
        assert (
            f"frachub up: jupyterhub-singleuser lives under {hidden} (mode 0700): user nobody "
            "cannot run it" in result.stderr
        )
        assert f"or chmod o+x {hidden}" in result.stderr
        assert "re-run scripts/up.sh" in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / "data" / "jupyterhub_config.py").exists()
    finally:
        shutil.rmtree(outer)


def test_gpu_sharing_mps_is_written_said_and_refused_without_the_binary(tmp_path: Path) -> None:
    """--gpu-sharing mps reaches the service's config and the start-up lines; without
    nvidia-cuda-mps-control it is refused in one line naming what to install."""
    fake = REPO / "tests" / "backends" / "fake_mps"
    argv = [*FRACHUB, "up", "--demo", "--declared", "--write-config-only", "--gpu-sharing", "mps"]
    found = run(
        [*argv, "--data-dir", str(tmp_path / "with")],
        env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
    )
    assert found.returncode == 0, found.stderr
    assert (
        "c.LocalBackend.gpu_sharing = 'mps'"
        in (tmp_path / "with" / "frachub_config.py").read_text()
    )
    assert "frachub up: GPU sharing: mps: one NVIDIA MPS control daemon per GPU" in found.stderr
    if shutil.which(
        "nvidia-cuda-mps-control", path="/usr/bin:/usr/local/bin:/usr/local/nvidia/bin"
    ):
        return  # a machine with the driver's utilities cannot show the refusal
    missing = run([*argv, "--data-dir", str(tmp_path / "without")], env={"PATH": "/bin"})
    assert missing.returncode == 2
    assert "frachub up: GPU sharing 'mps' needs nvidia-cuda-mps-control" in missing.stderr
    assert "Traceback" not in missing.stderr
    default = run(
        [
            *FRACHUB,
            "up",
            "--demo",
            "--declared",
            "--write-config-only",
            "--data-dir",
            str(tmp_path / "default"),
        ]
    )
    assert (
        "c.LocalBackend.gpu_sharing = 'cooperative'"
        in (tmp_path / "default" / "frachub_config.py").read_text()
    )
    assert "GPU sharing: cooperative: PyTorch and JAX are capped" in default.stderr
