"""Remote notebook runs over SSH against a real OpenSSH server on 127.0.0.1 (the "remote host" is this machine).

One session-scoped sshd (plus a second one as the ProxyJump bastion) serves every test that does not
break its server; the notebooks are tiny and run through the real ``python -m eagle3lens notebook`` path.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from _sshd import make_sshd, ssh_host, sshd_missing_reason, write_ed25519_key

from eagle3lens.commands.notebook import run_from_args
from eagle3lens.errors import HostKeyError, RemoteError
from eagle3lens.notebook.remote_run import REFRESH_S, RemoteRun, describe_progress, run_remote
from eagle3lens.remote.ssh import connect, load_ssh_config, resolve_host
from eagle3lens.remote.supervisor import MARKER

pytestmark = [pytest.mark.ssh,
              pytest.mark.skipif(sshd_missing_reason() is not None, reason=str(sshd_missing_reason()))]

PY = os.environ.get("EAGLE3LENS_TEST_REMOTE_PYTHON", sys.executable)  # the "remote" interpreter, reached over ssh
EVIL_TEMPLATE = ("it's \"quoted\"; echo ; rm -rf nothing $(touch {mark}/dollar) `touch {mark}/tick` "
                 "\n second line\t$HOME ${{PATH}} \\ %s {{}} | & > {mark}/redirect <")


# ------------------------------------------------------------------ the lab: keys, servers, config

class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.client_key = root / "keys" / "id_client"
        self.wrong_key = root / "keys" / "id_wrong"
        (root / "keys").mkdir(parents=True)
        self.client_pub = write_ed25519_key(self.client_key)
        write_ed25519_key(self.wrong_key)
        self.target = make_sshd(root / "target", [self.client_pub]).start()
        self.bastion = make_sshd(root / "bastion", [self.client_pub], ["LogLevel VERBOSE"]).start()
        self.nosftp = make_sshd(root / "nosftp", [self.client_pub], sftp=False).start()  # no Subsystem sftp
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(self.target.host_key_line() + self.bastion.host_key_line()
                                    + self.nosftp.host_key_line())
        self.ssh_config = root / "ssh_config"
        key = self.client_key
        self.ssh_config.write_text(
            ssh_host("e3l-target", self.target.port, key) + ssh_host("e3l-bastion", self.bastion.port, key)
            + ssh_host("e3l-nosftp", self.nosftp.port, key)
            + ssh_host("e3l-behind", self.target.port, key, "ProxyJump e3l-bastion")
            + ssh_host("e3l-wrongkey", self.target.port, self.wrong_key))

    def secrets(self) -> list[str]:
        """Strings that must never appear in fetched files: key paths and material, local config paths."""
        private_body = [line for line in self.client_key.read_text().splitlines() if "PRIVATE KEY" not in line]
        return [str(self.client_key), str(self.wrong_key), str(self.known_hosts), str(self.ssh_config),
                self.client_pub.split()[1], *private_body]

    def stop(self) -> None:
        self.target.stop()
        self.bastion.stop()
        self.nosftp.stop()


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory):
    lab = Lab(tmp_path_factory.mktemp("sshlab"))
    yield lab
    lab.stop()


def code(source: str, **metadata) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def write_notebook(path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = cells
    nbformat.write(nb, path)
    return path


def marked_processes(run_dir: str) -> list[str]:
    """Command lines of live processes that belong to a remote run (its marker is in their environment)."""
    needle = f"\0{MARKER}={run_dir}\0".encode()
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in env and state != "Z":
            alive.append(f"{pid}: {cmd}")
    return alive


def wait_gone(run_dir: str, seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while (alive := marked_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def all_text(directory: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in directory.rglob("*") if p.is_file())


# ------------------------------------------------------------------ pure parts (no server needed)

def test_ssh_config_alias_and_proxyjump_resolve(lab: Lab) -> None:
    config = load_ssh_config(lab.ssh_config)
    behind = resolve_host("e3l-behind", config, lab.known_hosts)
    assert (behind.hostname, behind.port, behind.user) == ("127.0.0.1", lab.target.port, "root")
    assert behind.identity_files == (str(lab.client_key),) and behind.identities_only
    assert behind.via is not None and behind.via.port == lab.bastion.port and behind.via.via is None
    explicit = resolve_host("alice@127.0.0.1:2200", config, lab.known_hosts)
    assert (explicit.user, explicit.hostname, explicit.port, explicit.via) == ("alice", "127.0.0.1", 2200, None)
    assert explicit.host_key_name == "[127.0.0.1]:2200"
    with pytest.raises(RemoteError, match="bad port"):
        resolve_host("gpu:notaport", config)
    with pytest.raises(RemoteError, match="ssh config file not found"):
        load_ssh_config(lab.root / "missing_config")


def test_describe_progress_names_last_and_failed_cell(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [code("a = 1", papermill={"status": "completed"}), code("\nb = a / 0", papermill={"status": "failed"}),
                code("c = 3", papermill={"status": "pending"})]
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero")]
    nbformat.write(nb, tmp_path / "x.ipynb")
    last, error = describe_progress(tmp_path / "x.ipynb")
    assert last == "code cell 2 of 3 `b = a / 0`"
    assert error == "code cell 2 of 3 `b = a / 0` failed: ZeroDivisionError: division by zero"


def test_fetched_names_cannot_leave_the_output_folder(tmp_path: Path) -> None:
    from eagle3lens.notebook.remote_run import local_path

    out = tmp_path / "out" / "gpu1"
    out.mkdir(parents=True)
    assert local_path(out, "nb.ipynb") == out / "nb.ipynb"
    assert local_path(out, "figs/a.png") == out / "figs" / "a.png"
    for hostile in ("../x", "../../x", "a/../../x", "..", ".", "a//b", "/etc/passwd", "a\\..\\x", "a\0b"):
        with pytest.raises(RemoteError):
            local_path(out, hostile)
    (out / "link").symlink_to(tmp_path)  # a link left in the folder must not carry a write out of it
    with pytest.raises(RemoteError, match="outside"):
        local_path(out, "link/x")


def test_describe_progress_and_failed_cell_number_cells_alike(tmp_path: Path) -> None:
    """The injected parameters cell is never counted, a running cell is marked, and the local error names the
    same cell as the remote progress line."""
    from eagle3lens.notebook.runner import failed_cell

    nb = nbformat.v4.new_notebook()
    injected = code("x = 1", papermill={"status": "completed", "start_time": "t"})
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells = [code("a = 1", papermill={"status": "completed", "start_time": "t"}), injected,
                code(["\n", "  slow()  \n", "more()"], papermill={"status": "running", "start_time": "t"}),
                code("c = 3", papermill={"status": "pending"})]
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    assert describe_progress(path) == ("code cell 2 of 3 (running) `slow()`", None)
    label, first, _ = failed_cell(nbformat.read(path, as_version=4))
    assert (label, first) == ("code cell 2 of 3", "slow()")
    path.write_text(json.dumps({"cells": [injected]}))
    assert describe_progress(path) == ("no cell ran (0 of 0 code cells)", None)


# ------------------------------------------------------------------ host keys and authentication

def test_unknown_host_key_refused_without_opt_in_and_recorded_with_it(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    config = load_ssh_config(lab.ssh_config)
    target = resolve_host("e3l-target", config, known)
    with pytest.raises(HostKeyError, match=r"not in known_hosts .*--accept-new-host-key") as refused:
        connect(target)
    assert "\n" not in str(refused.value) and not known.exists()

    with connect(target, accept_new_host_key=True) as conn:
        assert conn.run(["echo", "hello"]) == (0, "hello\n")
    assert known.read_text() == lab.target.host_key_line()  # recorded as OpenSSH writes it: [127.0.0.1]:PORT
    with connect(target) as conn:  # now known: no opt-in needed
        assert conn.alive


def test_unknown_host_key_refused_by_run_remote_cli(lab: Lab, tmp_path: Path, capsys) -> None:
    notebook = write_notebook(tmp_path / "nb.ipynb", [code("x = 1")])
    args = notebook_parser().parse_args([str(notebook), "--host", "e3l-target", "--ssh-config", str(lab.ssh_config), "--known-hosts",
                              str(tmp_path / "empty_known_hosts"), "--out", str(tmp_path / "out"), "--json"])
    assert run_from_args(args, notebook, {}) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("eagle3lens: error:")]
    assert len(errors) == 1 and "not in known_hosts" in errors[0]
    assert json.loads(captured.out)["hosts"][0]["status"] == "refused"
    manifest = (tmp_path / "out" / "e3l-target" / "remote.json").read_text()
    assert json.loads(manifest)["status"] == "refused"
    assert not any(secret in manifest for secret in lab.secrets())


def notebook_parser() -> argparse.ArgumentParser:
    """The ``eagle3lens notebook`` parser as the CLI builds it."""
    from eagle3lens.commands import notebook as command

    sub = argparse.ArgumentParser(prog="eagle3lens").add_subparsers()
    command.register(sub)
    return sub.choices["notebook"]


def test_remote_arguments_fit_the_notebook_command() -> None:
    parser = notebook_parser()
    args = parser.parse_args(["00_triage", "--host", "gpu1", "--host", "me@gpu2:2222", "--timeout", "90",
                              "--remote-python", "~/venv/bin/python", "--accept-new-host-key"])
    assert args.host == ["gpu1", "me@gpu2:2222"] and args.timeout == 90.0 and args.accept_new_host_key
    assert args.remote_python == "~/venv/bin/python" and args.known_hosts is None and args.ssh_config is None


def test_cli_notebook_host_end_to_end(lab: Lab, tmp_path: Path, capsys) -> None:
    from eagle3lens import cli

    notebook = write_notebook(tmp_path / "tiny.ipynb", [code("x = 1", tags=["parameters"]), code("print(x * 2)")])
    code_ = cli.main(["notebook", str(notebook), "-p", "x", "21", "--host", "e3l-target", "--remote-python", PY,
                      "--ssh-config", str(lab.ssh_config), "--known-hosts", str(lab.known_hosts),
                      "--out", str(tmp_path / "out"), "--json"])
    captured = capsys.readouterr()
    assert code_ == 0, captured.err
    (host,) = json.loads(captured.out)["hosts"]
    assert host["status"] == "ok" and "tiny.ipynb" in host["files"]
    executed = nbformat.read(tmp_path / "out" / "e3l-target" / "tiny.ipynb", as_version=4)
    assert "42" in executed.cells[-1].outputs[0]["text"]


@pytest.mark.parametrize("name,value,problem", [
    ("chat", "it's \"quoted\" $(touch {mark}) `touch {mark}`; a", ": no such chat file"),
    ("temperature", "__import__('os').system('touch {mark}')", "08_low_acceptance takes a number there"),
])
def test_a_refused_host_run_is_one_stderr_line_and_no_value_reaches_a_shell(lab: Lab, tmp_path: Path, capsys,
                                                                            name: str, value: str, problem: str) -> None:
    """A legal path holding quotes and ``$()`` travels to the host (in the parameters file, never on a shell line)
    and fails there: one escaped line naming the host and the parameter, no progress (stderr is no terminal), and
    the marker a shell would make never appears; text where a number goes is refused before the host."""
    from eagle3lens import cli

    mark = tmp_path / "ran"
    value = value.format(mark=mark)
    rc = cli.main(["notebook", "08_low_acceptance", "-p", name, value, "--host", "e3l-target", "--remote-python", PY,
                   "--ssh-config", str(lab.ssh_config), "--known-hosts", str(lab.known_hosts),
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and problem in err, err
    assert not mark.exists()
    if name == "chat":
        assert err.startswith("eagle3lens: error: e3l-target: -p chat: code cell ") and value in err
        assert (tmp_path / "out" / "e3l-target" / "remote.json").exists()  # the run reached the host
    else:
        assert err.startswith("eagle3lens: error: -p temperature: ") and not (tmp_path / "out").exists()


def test_host_progress_goes_to_a_terminal_and_the_failure_stays_one_line(lab: Lab, tmp_path: Path) -> None:
    """On a terminal the hosts' progress lines show while the run goes; the remote command's own error line is not
    among them: the failure is told once, last, as the one summary line."""
    import pty
    import subprocess

    notebook = write_notebook(tmp_path / "opens.ipynb", [code("data = 'x'", tags=["parameters"]),
                                                         code("open(data)")])
    missing = "no such \"file\" $(x)"
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle3lens", "notebook", str(notebook), "-p", "data", missing, "--host", "e3l-target",
         "--remote-python", PY, "--ssh-config", str(lab.ssh_config), "--known-hosts", str(lab.known_hosts),
         "--out", str(tmp_path / "out"), "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    out, _ = proc.communicate(timeout=120)
    lines = b"".join(chunks).decode().splitlines()
    assert proc.returncode == 2 and json.loads(out)["hosts"][0]["status"] == "failed"
    assert any(line.startswith("[e3l-target] running opens.ipynb on 127.0.0.1") for line in lines), lines
    assert lines[-1].startswith("eagle3lens: error: e3l-target: -p data: code cell 2 of 2 `open(data)` failed: "
                                "FileNotFoundError: ") and missing in lines[-1], lines
    assert sum("error" in line.lower() for line in lines) == 1, lines


def test_changed_host_key_refused_even_with_opt_in(lab: Lab, tmp_path: Path) -> None:
    impostor = tmp_path / "impostor"
    write_ed25519_key(impostor)
    algo, b64 = Path(f"{impostor}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"{lab.target.host_pattern} {algo} {b64}\n")
    target = resolve_host("e3l-target", load_ssh_config(lab.ssh_config), known)
    for opt_in in (False, True):
        with pytest.raises(HostKeyError, match=r"has CHANGED .*refusing to connect") as changed:
            connect(target, accept_new_host_key=opt_in)
        assert "\n" not in str(changed.value)
    assert known.read_text() == f"{lab.target.host_pattern} {algo} {b64}\n"  # untouched


def test_wrong_client_key_refused(lab: Lab) -> None:
    target = resolve_host("e3l-wrongkey", load_ssh_config(lab.ssh_config), lab.known_hosts)
    with pytest.raises(RemoteError, match=r"authentication as root on 127.0.0.1:\d+ was refused") as refused:
        connect(target)
    assert str(lab.wrong_key) not in str(refused.value)


def test_preflight_problems_are_one_line_each(lab: Lab, tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "nb.ipynb", [code("x = 1")])
    result = run_remote(notebook, {}, "e3l-target", tmp_path / "out", remote_python=str(tmp_path / "no-python"),
                        known_hosts=lab.known_hosts, ssh_config=lab.ssh_config)
    (host,) = result.hosts
    assert host.status == "refused" and "not found: pass --remote-python" in host.error and "\n" not in host.error

    bare = Path("/usr/bin/python3")  # the system python: no eagle3lens there
    if bare.exists() and bare.resolve() != Path(PY).resolve():
        result = run_remote(notebook, {}, "e3l-target", tmp_path / "out2", remote_python=str(bare),
                            known_hosts=lab.known_hosts, ssh_config=lab.ssh_config)
        assert result.hosts[0].status == "refused"
        assert "eagle3lens is not installed for" in result.hosts[0].error
        assert result.hosts[0].preflight.problems and all("\n" not in p for p in result.hosts[0].preflight.problems)


# ------------------------------------------------------------------ real notebook runs

def test_two_hosts_alias_and_proxyjump_run_with_verbatim_parameters(lab: Lab, tmp_path: Path) -> None:
    mark = tmp_path / "marks"
    mark.mkdir()
    evil = EVIL_TEMPLATE.format(mark=mark)
    notebook = write_notebook(tmp_path / "probe.ipynb", [
        code("evil = 'default'\nseverity = 'warning'", tags=["parameters"]),
        code("import json\nprint('EVIL=' + json.dumps(evil))"),
        code("from eagle3lens.notebook import kernel as nb\nfrom eagle3lens.findings import Finding\n"
             "nb.record_findings([Finding('weights/init-like', severity, 'fc looks untrained')])"),
    ])
    lines: list[tuple[str, str]] = []
    result = run_remote(notebook, {"evil": evil, "severity": "critical"}, ["e3l-target", "e3l-behind"],
                        tmp_path / "out", timeout=120, remote_python=PY, known_hosts=lab.known_hosts,
                        ssh_config=lab.ssh_config, progress=lambda host, line: lines.append((host, line)))
    assert isinstance(result, RemoteRun)
    assert [h.status for h in result.hosts] == ["ok", "ok"], [h.error for h in result.hosts]
    assert result.exit_code("critical") == 1 and result.exit_code("critical") == result.exit_code()
    for host in result.hosts:
        out = tmp_path / "out" / host.host
        assert host.out_dir == out
        assert set(host.files) == {"probe.ipynb", "probe.html", "probe.findings.json"}
        executed = nbformat.read(out / "probe.ipynb", as_version=4)
        assert executed.metadata.papermill.parameters["evil"] == evil
        printed = "".join(o.get("text", "") for o in executed.cells[2].outputs)
        assert json.loads(printed.split("EVIL=", 1)[1]) == evil  # arrived verbatim in the kernel
        assert [f.code for f in host.findings] == ["weights/init-like"]
        assert host.findings[0].severity.value == "critical"
        assert host.preflight.eagle3lens and host.preflight.papermill and host.preflight.free_bytes > 0
        assert host.remote_dir_removed and not Path(host.remote_dir).exists()
        manifest = json.loads((out / "remote.json").read_text())
        assert manifest["status"] == "ok" and manifest["last_cell"].startswith("code cell 3 of 3")
        fetched = all_text(out)
        assert not [s for s in lab.secrets() if s in fetched], "secret material in fetched files"
        assert any(h == host.host and line.startswith("cell ") for h, line in lines)
    assert list(mark.iterdir()) == []  # no substitution, backtick or redirect ran anywhere
    assert "Accepted publickey for root" in lab.bastion.log.read_text()  # e3l-behind went through the bastion


def test_host_without_sftp_and_ssh_url_host(lab: Lab, tmp_path: Path) -> None:
    """A host whose sshd serves no SFTP gets its files over the exec channel (names with shell metacharacters
    included); ``ssh://alias`` is a host, its output folder the alias."""
    marks = [Path.home() / "e3l-mark-dollar", Path.home() / "e3l-mark-tick"]  # where a shell would touch them
    name = "it's $(touch e3l-mark-dollar) `touch e3l-mark-tick`; a.ipynb"  # run from the remote home
    notebook = write_notebook(tmp_path / name, [
        code("n = 1", tags=["parameters"]),
        code("import pathlib\npathlib.Path('blob.bin').write_bytes(bytes(range(256)) * 4000)\nprint(n * 7)"),
    ])
    lines: list[tuple[str, str]] = []
    result = run_remote(notebook, {"n": 6}, ["e3l-nosftp", "ssh://e3l-target"], tmp_path / "out", timeout=120,
                        remote_python=PY, known_hosts=lab.known_hosts, ssh_config=lab.ssh_config,
                        progress=lambda host, line: lines.append((host, line)))
    assert [h.status for h in result.hosts] == ["ok", "ok"], [h.error for h in result.hosts]
    nosftp, url = result.hosts
    assert nosftp.out_dir == tmp_path / "out" / "e3l-nosftp" and url.out_dir == tmp_path / "out" / "e3l-target"
    for host in result.hosts:
        executed = nbformat.read(host.out_dir / name, as_version=4)
        assert executed.cells[-1].outputs[0]["text"].strip() == "42"
        assert host.remote_dir_removed and not Path(host.remote_dir).exists()
    notes = [line for host, line in lines if "SFTP" in line]
    assert [h for h, line in lines if "SFTP" in line] == ["e3l-nosftp"], lines
    assert notes == [("note: the host serves no SFTP (no `Subsystem sftp` in its sshd_config); "
                      "files go over the exec channel")]
    assert not any(m.exists() for m in marks)  # nothing in the name was run by a shell
    sftp_note = "the host serves no SFTP (no `Subsystem sftp` in its sshd_config); files go over the exec channel"
    assert sftp_note in nosftp.notes and not any("SFTP" in n for n in url.notes)  # kept for the view and JSON
    assert nosftp.to_dict()["notes"] == list(nosftp.notes)
    from rich.console import Console

    from eagle3lens.plots.remote import remote_rich

    console = Console(width=300, record=True, file=io.StringIO())
    console.print(remote_rich(result))
    assert f"e3l-nosftp: note: {sftp_note}" in console.export_text()  # the table's caption: stdout, not stderr


def test_failing_cell_reported_with_partial_notebook(lab: Lab, tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "fails.ipynb", [
        code("x = 41\nprint('first cell ran')"),
        code("raise ValueError('boom from the remote cell')"),
        code("print('never')"),
    ])
    result = run_remote(notebook, None, "e3l-target", tmp_path / "out", timeout=120, remote_python=PY,
                        known_hosts=lab.known_hosts, ssh_config=lab.ssh_config)
    (host,) = result.hosts
    assert host.status == "failed"
    assert "code cell 2 of 3 `raise ValueError('boom from the remote cell')` failed: ValueError: boom" in host.error
    assert host.last_cell == "code cell 2 of 3 `raise ValueError('boom from the remote cell')`"
    executed = nbformat.read(tmp_path / "out" / "e3l-target" / "fails.ipynb", as_version=4)
    by_source = {c.source: c for c in executed.cells if c.cell_type == "code"}
    assert "first cell ran" in by_source["x = 41\nprint('first cell ran')"].outputs[0]["text"]
    assert by_source["print('never')"].metadata.papermill.status == "pending"
    assert result.exit_code() == 2 and not Path(host.remote_dir).exists()


def test_timeout_kills_remote_process_group(lab: Lab, tmp_path: Path) -> None:
    flag = tmp_path / "sleeping"
    notebook = write_notebook(tmp_path / "slow.ipynb", [
        code("flag = ''", tags=["parameters"]),
        code("import pathlib, time\npathlib.Path(flag).write_text('x')\ntime.sleep(300)"),
    ])
    started = time.monotonic()
    result = run_remote(notebook, {"flag": str(flag)}, "e3l-target", tmp_path / "out", timeout=8,
                        remote_python=PY, known_hosts=lab.known_hosts, ssh_config=lab.ssh_config)
    elapsed = time.monotonic() - started
    (host,) = result.hosts
    assert host.status == "timeout" and "timed out after 8 s" in host.error, host.error
    assert elapsed < 8 + 30
    assert wait_gone(host.remote_dir, 5) == []  # papermill, the eagle3lens command and the kernel are gone
    assert not Path(host.remote_dir).exists() and result.exit_code() == 2
    if flag.exists():  # the kernel started (a loaded machine may take longer): the sleeping cell is named
        require_partial_notebook(host, "slow.ipynb")
        # numbered in the source notebook: papermill's injected parameters cell is not counted
        assert host.last_cell.startswith("code cell 2 of 2 (running) `import pathlib, time"), host.last_cell
        assert "last cell that ran: code cell 2 of 2" in host.error


def test_cancel_stops_the_run_and_fetches_the_partial_notebook(lab: Lab, tmp_path: Path) -> None:
    """What Ctrl-C does: ``run_remote`` sets ``cancel`` on KeyboardInterrupt; here the test sets it."""
    flag = tmp_path / "sleeping"
    notebook = write_notebook(tmp_path / "slow.ipynb", [
        code("flag = ''", tags=["parameters"]),
        code("import pathlib, time\npathlib.Path(flag).write_text('x')\ntime.sleep(300)"),
    ])
    cancel = threading.Event()
    waiter = threading.Thread(target=lambda: (wait_for(flag.exists, 90), cancel.set()), daemon=True)
    waiter.start()
    result = run_remote(notebook, {"flag": str(flag)}, "e3l-target", tmp_path / "out", remote_python=PY,
                        known_hosts=lab.known_hosts, ssh_config=lab.ssh_config, cancel=cancel)
    (host,) = result.hosts
    assert flag.exists() and host.status == "interrupted" and result.exit_code() == 130
    assert wait_gone(host.remote_dir, 5) == [] and not Path(host.remote_dir).exists()
    require_partial_notebook(host, "slow.ipynb")
    assert host.last_cell.startswith("code cell 2 of 2 (running)")


def require_partial_notebook(host, name: str) -> None:
    """The remote ``eagle3lens notebook`` saves after every cell, so a stopped run leaves a partial notebook."""
    assert name in host.files, ("no partial notebook fetched: does eagle3lens.notebook.kernel.run_notebook still save "
                                f"after every cell (papermill request_save_on_cell_execute)? {host}")


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_sshd_killed_mid_run_keeps_what_was_fetched(lab: Lab, tmp_path: Path) -> None:
    doomed = make_sshd(tmp_path / "doomed", [lab.client_pub]).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(doomed.host_key_line())
        config = tmp_path / "ssh_config"
        config.write_text(ssh_host("doomed", doomed.port, lab.client_key))
        flag = tmp_path / "sleeping"
        notebook = write_notebook(tmp_path / "long.ipynb", [
            code("flag = ''", tags=["parameters"]),
            code("print('cell one done')"),
            code("import pathlib, time\npathlib.Path(flag).write_text('x')\ntime.sleep(300)"),
        ])
        box: dict[str, RemoteRun] = {}
        worker = threading.Thread(target=lambda: box.setdefault("run", run_remote(
            notebook, {"flag": str(flag)}, "doomed", tmp_path / "out", timeout=200, remote_python=PY,
            known_hosts=known, ssh_config=config)))
        worker.start()
        if not wait_for(lambda: flag.exists() or not worker.is_alive(), 90) or not worker.is_alive():
            worker.join(30)
            pytest.fail(f"the remote kernel never reached the sleeping cell: {box.get('run')}")
        time.sleep(REFRESH_S + 1)  # one refresh: a saved partial notebook has been fetched by now
        doomed.kill_everything()
        worker.join(60)
        assert not worker.is_alive()
        (host,) = box["run"].hosts
        assert host.status == "disconnected" and box["run"].exit_code() == 2
        assert f"connection to 127.0.0.1:{doomed.port} lost" in host.error
        assert f"kept {len(host.files)} file(s)" in host.error if host.files else "nothing fetched" in host.error
        assert all((tmp_path / "out" / "doomed" / f).is_file() for f in host.files)
        assert wait_gone(host.remote_dir, 10) == []  # the supervisor saw its stdin close and killed the group
        assert Path(host.remote_dir).is_dir() and not host.remote_dir_removed  # unreachable: left in place, said so
        shutil.rmtree(host.remote_dir)
        require_partial_notebook(host, "long.ipynb")
        assert host.last_cell.startswith("code cell 3 of 3 (running)")
        assert "last cell that ran: code cell 3 of 3 (running)" in host.error
    finally:
        doomed.stop()


@pytest.mark.slow
def test_triage_walkthrough_on_demo(lab: Lab, tmp_path: Path, demo_dir: Path) -> None:
    from eagle3lens.notebook.runner import walkthroughs

    if "00_triage" not in walkthroughs():
        pytest.fail("notebooks/00_triage.ipynb is missing")
    result = run_remote("00_triage", {"demo_dir": str(demo_dir)}, "e3l-target", tmp_path / "out", timeout=300,
                        remote_python=PY, known_hosts=lab.known_hosts, ssh_config=lab.ssh_config)
    (host,) = result.hosts
    assert host.status == "ok", host.error
    assert {"00_triage.ipynb", "00_triage.html", "00_triage.findings.json"} <= set(host.files)
    from eagle3lens.notebook.runner import collect_findings

    out = tmp_path / "out" / "e3l-target"
    assert list(host.findings) == collect_findings(out / "00_triage.ipynb")  # what the notebook recorded
    assert "keys/dropped" in {f.code for f in host.findings}  # the demo incident: SGLang drops layers.0.*
    assert result.exit_code("critical") == 1


def _fake_python(path: Path, body: str) -> Path:
    """A remote "python" that runs ``body`` (sh) for the calls a test forges and the real one for the rest."""
    path.write_text(f"#!/bin/sh\n{body}\nexec {PY} \"$@\"\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("record,problem", [
    ("{}", "its pre-flight record lacks 'python'"),
    ("[1, 2]", "its pre-flight record is a JSON list, not an object"),
    ('{"python": "3.11", "executable": "/x", "workdir": "/tmp", "eagle3lens": null, "papermill": null, '
     '"gpu": [1], "gpu_source": null, "free_bytes": 5}', "its pre-flight record has 'gpu' = [1], not a list of names"),
    ('{"python": "3.11", "executable": "/x", "workdir": "/tmp", "eagle3lens": null, "papermill": null, '
     '"gpu": null, "gpu_source": null, "free_bytes": "lots"}', "has 'free_bytes' = \"lots\", not int or null"),
    ("not json \x1b[31m", "failed the pre-flight check (exit 0): not json \\x1b[31m"),
])
def test_a_preflight_record_that_is_not_json_or_lacks_keys_is_one_line(lab: Lab, tmp_path: Path, capsys, record: str,
                                                                       problem: str) -> None:
    from eagle3lens import cli

    fake = _fake_python(tmp_path / "python", f"printf '%s\\n' '{record}'; exit 0")
    notebook = write_notebook(tmp_path / "nb.ipynb", [code("x = 1", tags=["parameters"])])
    rc = cli.main(["notebook", str(notebook), "--host", "e3l-target", "--remote-python", str(fake),
                   "--ssh-config", str(lab.ssh_config), "--known-hosts", str(lab.known_hosts),
                   "--out", str(tmp_path / "out"), "--json"])
    captured = capsys.readouterr()
    (host,) = json.loads(captured.out)["hosts"]
    assert rc == 2 and host["status"] == "refused" and problem in host["error"], host["error"]
    assert captured.err.count("\n") == 1 and captured.err.startswith("eagle3lens: error: e3l-target: remote python")
    assert "Error" not in host["error"] and "\x1b" not in captured.err


@pytest.mark.parametrize("line", ["eagle3lens-execution {not json", 'eagle3lens-execution {"root": "x"}',
                                  "eagle3lens-execution [1]"])
def test_an_execute_record_that_is_not_json_or_lacks_keys_is_one_line(lab: Lab, tmp_path: Path, line: str) -> None:
    from _builders import draft_tensors, speculators_config, write

    from eagle3lens.checkpoint import Checkpoint
    from eagle3lens.engines.execute_remote import execute_on_host
    from eagle3lens.errors import UsageError

    fake = _fake_python(tmp_path / "python", f'[ "$1" = "-m" ] && {{ printf "%s\\n" \'{line}\'; exit 0; }}')
    ckpt = Checkpoint.open(write(tmp_path / "ckpt", draft_tensors("layers.0."), speculators_config()))
    with pytest.raises(UsageError, match=r"^e3l-target: its --execute record is unreadable \(") as info:
        execute_on_host(ckpt, "e3l-target", fallback_class=None, python=str(fake), ssh_config=lab.ssh_config,
                        known_hosts=lab.known_hosts)
    assert "\n" not in str(info.value)
