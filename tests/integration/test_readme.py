"""The README's quick start and the guide's command examples, run as a user runs them.

Each command line of the shell blocks is run as written, in a shell, with three substitutions a
reader makes too: the ports (8080, 9070, 9080, 9081 become free ones), `.venv/bin/` (this test's
virtualenv) and the ids the examples abbreviate (`inv_1…`, `sign_1…`: the last one an earlier
command printed). Lines that start servers (`torpor dev`, `hypercorn`, `python -m examples.serve`)
are started in the background, each in its own process, and stopped at the end. A command that
exits non-zero, or a `curl` answered with an HTTP error, fails the test with its output.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conformance.harness import ManagedProcess, child_env, free_port, wait_http
from tests.helpers.services import REPO_ROOT

README = REPO_ROOT / "README.md"
GUIDE = REPO_ROOT / "docs" / "guide.md"
QUICKSTART = REPO_ROOT / "examples" / "quickstart" / "reminders.py"
VENV_BIN = Path(sys.executable).parent
SERVER_WORDS = ("torpor dev", "hypercorn ", "-m examples.serve")
COMMENT = re.compile(r"\s{2,}#.*$")


def blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of `language` in the Markdown file at `path`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.M | re.S)


def section(path: Path, heading: str) -> Path:
    """A file holding the part of `path` under `heading` (to the next heading of its level or above)."""
    text = path.read_text(encoding="utf-8")
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    rest = text[start + len(heading) + 2 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, flags=re.M)]
    part = rest[: ends[0]] if ends else rest
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"readme-section-{abs(hash((path, heading)))}.md"
    out.write_text(part, encoding="utf-8")
    return out


def line_after(lines: list[str], index: int) -> str:
    return lines[index] if index < len(lines) else ""


class Reader:
    """Runs command lines as the docs show them, on free ports, remembering the ids they print."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = {p: free_port() for p in ("8080", "9070", "9080", "9081")}
        self.ids: dict[str, str] = {}
        self.servers: list[ManagedProcess] = []
        self.env = child_env(
            {
                "TORPOR_ADMIN_URL": f"http://127.0.0.1:{self.ports['9070']}",
                "TORPOR_INGRESS_URL": f"http://127.0.0.1:{self.ports['8080']}",
                "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        self.outputs: list[str] = []

    def substitute(self, line: str) -> str:
        line = line.replace(".venv/bin/", f"{VENV_BIN}/")
        for port, free in self.ports.items():
            line = re.sub(rf"(?<=:){port}\b|(?<=--port ){port}\b", str(free), line)
        for prefix in ("inv_1", "sign_1"):
            if f"{prefix}…" in line:
                assert prefix in self.ids, f"no {prefix}… id printed before: {line}"
                line = line.replace(f"{prefix}…", self.ids[prefix])
        if line.startswith("curl "):
            line = "curl -sS --fail-with-body " + line[len("curl ") :]
        return line

    def start_server(self, line: str, cwd: Path) -> None:
        command = self.substitute(line)
        argv = shlex.split(command)
        if "torpor dev" in line:
            argv += ["--ingress-port", str(self.ports["8080"]), "--admin-port", str(self.ports["9070"])]
        server = ManagedProcess(f"readme-{len(self.servers)}", argv, self.env, cwd=cwd)
        server.start()
        self.servers.append(server)
        if "torpor dev" in line:
            wait_http(f"http://127.0.0.1:{self.ports['9070']}/health", server, timeout_s=60)
        else:
            port = re.search(r"(?::|--port )(\d+)\b", command)
            assert port is not None, command
            wait_http(f"http://127.0.0.1:{port.group(1)}/discover", server, timeout_s=60, ok=lambda r: True)

    def run(self, line: str, cwd: Path, until: str | None = None, timeout_s: float = 30) -> str:
        """Run one command line; with `until`, run it again (0.5 s apart) until its output contains it."""
        command = self.substitute(line)
        deadline = time.monotonic() + timeout_s
        while True:
            done = subprocess.run(
                command, shell=True, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=120
            )
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{output[-3000:]}"
            if until is None or until in output or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for prefix in ("inv_1", "sign_1"):
            found = re.findall(rf"\b{prefix}[0-9A-Za-z_-]{{10,}}", output)
            # the docs' `inv_1…` is always the invocation sent last (a call's id is not what they follow)
            if found and (prefix != "inv_1" or "send" in line):
                self.ids[prefix] = found[-1]
        self.outputs.append(output)
        return output

    def run_block(self, block: str, cwd: Path) -> list[str]:
        """Run every line of a shell block (servers in the background); returns the commands' outputs."""
        lines = [COMMENT.sub("", raw).strip() for raw in block.splitlines()]
        lines = [line for line in lines if line and not line.startswith("#")]
        outputs = []
        for index, line in enumerate(lines):
            if any(word in line for word in SERVER_WORDS):
                self.start_server(line, cwd)
                continue
            following = lines[index + 1] if index + 1 < len(lines) else ""
            # a reader waits for what the next command needs (the awakeable appears after the sleep)
            until = "sign_1" if "sign_1…" in following + line_after(lines, index + 2) and "describe" in line else None
            outputs.append(self.run(line, cwd, until=until))
        return outputs

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    r = Reader(tmp_path)
    try:
        yield r
    finally:
        r.stop()


def quickstart_copy(root: Path, returned: str | None = None) -> Path:
    """A directory holding `examples/quickstart/reminders.py` as the README shows it (its `return` line replaced)."""
    target = root / "examples" / "quickstart"
    target.mkdir(parents=True)
    text = QUICKSTART.read_text(encoding="utf-8")
    if returned is not None:
        text = re.sub(r"^    return f\"\{text\}:.*$", returned.rstrip(), text, count=1, flags=re.M)
        assert returned.strip() in text
    (target / "reminders.py").write_text(text, encoding="utf-8")
    return root


def test_the_readme_shows_the_quickstart_service_as_it_is() -> None:
    shown = blocks(section(README, "## Write your own service"), "python")
    assert shown[0].strip() == QUICKSTART.read_text(encoding="utf-8").strip()


def test_the_readme_quickstart_runs_as_written(reader: Reader, tmp_path: Path) -> None:
    quick = section(README, "## Write your own service")
    shell, python = blocks(quick, "sh"), blocks(quick, "python")
    assert len(shell) == 3 and len(python) == 2, "the quick start's blocks changed: update this test"
    first = quickstart_copy(tmp_path / "v1")
    reader.run_block(shell[0], first)
    outputs = reader.run_block(shell[1], first)
    assert "Reminders" in outputs[0]
    assert "sign_1" in outputs[4] and "water the plants" in outputs[4], outputs[4]
    assert outputs[-1].strip() == '"water the plants: done, said Ann"'

    second = quickstart_copy(tmp_path / "v2", returned=python[1])
    outputs = reader.run_block(shell[2], second)
    listed = outputs[-1]
    assert len(set(re.findall(r"\bdp_[0-9A-Za-z]+", listed))) == 2, listed

    # new invocations run the new code
    admin, ingress = reader.env["TORPOR_ADMIN_URL"], reader.env["TORPOR_INGRESS_URL"]
    sent = httpx.post(f"{ingress}/restate/send/Reminders/bob/remind", json="feed the cat", timeout=10).json()
    deadline = time.monotonic() + 30
    awakeable = None
    while awakeable is None and time.monotonic() < deadline:
        state = httpx.post(f"{ingress}/Reminders/bob/status", json=None, timeout=10).json()
        awakeable = state.get("waiting_for")
        time.sleep(0.5)
    assert awakeable, "the second invocation never reached its awakeable"
    httpx.post(f"{ingress}/restate/awakeables/{awakeable}/resolve", json="Bob", timeout=10).raise_for_status()
    output = httpx.get(f"{ingress}/restate/invocation/{sent['invocationId']}/attach", timeout=30)
    assert output.json() == "feed the cat: done by Bob"
    assert httpx.get(f"{admin}/health", timeout=5).status_code == 200


def test_the_guides_first_commands_run_as_written(reader: Reader, tmp_path: Path) -> None:
    """docs/guide.md: the first steps with the example services, the `torpor` CLI, durable schedules."""
    usage = blocks(section(GUIDE, "## The example services and `torpor dev`"), "sh")
    schedules = blocks(section(GUIDE, "## Durable schedules (`torpor schedules`)"), "bash")
    workdir = tmp_path / "guide"  # `torpor dev` keeps its data in .torpor/ there; the examples come from PYTHONPATH
    workdir.mkdir()
    outputs = reader.run_block(usage[0], workdir)
    assert outputs[1].strip() == '"Hello, Ann!"'
    assert '"C-1"' in outputs[-1] and "ann@example.com" in outputs[-1], outputs[-1]
    cli = [line for line in usage[1].splitlines() if "torpor sql" not in line]  # SQL: its own test (the query extra)
    reader.run_block("\n".join(cli), workdir)
    outputs = reader.run_block(schedules[0], workdir)
    assert "hourly-greeting" in outputs[2] and "poll" in outputs[2]
