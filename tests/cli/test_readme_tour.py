"""README.md's tour, run as written.

The tour is the README's fenced block opened with ```` ```sh tour ````. Its commands run in
order in one `bash`, started in the repository's root (the tour activates `.venv` from
there) with `TMPDIR` inside the test's temporary directory, so the tour's `mktemp -d` and
the cluster it starts land there; the nodes listen on 127.0.0.1. Every command must exit
with status 0, and print what the `#>` lines under it show: each such line is a piece of
one line of the command's output, blanks compared as one, `…` standing for any text.

Whatever happens, every cluster the tour started is stopped at the end, and the run is
bounded in time. Spark runs without a class-data archive and with its cache in the
temporary directory, so that no recorder outlives the test (docs/verify.md)."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OPENING = "```sh tour"
TOUR_S = 420  # the whole tour; Spark's start and job are most of it
STEP_S = 180  # one command (a wait for a cluster that never comes up ends here)
STOP_S = 120  # `kraftcore cluster down` and the supervisor's own stop, each
BEGIN, END = "@@readme-tour-begin", "@@readme-tour-end"

pytestmark = pytest.mark.spark


def tour(text):
    """[(command, [expected line, ...])] of the tour block, in order."""
    lines = text.splitlines()
    try:
        start = lines.index(OPENING) + 1
    except ValueError:
        raise AssertionError(f"README.md has no block opened with {OPENING!r}") from None
    steps = []
    pending = ""
    for line in lines[start:]:
        if line.startswith("```"):
            break
        if pending:
            pending += "\n" + line
        elif line.startswith("#>"):
            if not steps:
                raise AssertionError(f"{line!r} comes before any command")
            steps[-1][1].append(line[2:].strip())
            continue
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        else:
            pending = line
        if pending.endswith("\\"):
            continue
        steps.append((pending, []))
        pending = ""
    else:
        raise AssertionError("the tour block is not closed")
    assert not pending, f"the tour ends inside a continued line: {pending!r}"
    return steps


def script(steps):
    """The bash script that runs the steps: each between two marker lines, the second
    with its exit status; the first that fails ends the script."""
    out = []
    for number, (command, _) in enumerate(steps):
        out += [f"printf '\\n{BEGIN} {number}\\n'",
                command,
                "__status=$?",
                f"printf '\\n{END} {number} %d\\n' \"$__status\"",
                '[ "$__status" -eq 0 ] || exit "$__status"']
    return "\n".join(out) + "\n"


def sections(output):
    """{step number: (exit status or None, [output lines])} from the marked output."""
    found = {}
    current = None
    for line in output.splitlines():
        if line.startswith(BEGIN):
            current = int(line.split()[1])
            found[current] = (None, [])
        elif line.startswith(END):
            number, status = map(int, line.split()[1:3])
            found[number] = (status, found[number][1])
            current = None
        elif current is not None:
            found[current][1].append(line)
    return found


def shows(expected, lines):
    """Whether one of `lines` holds `expected` (blanks compared as one, … any text)."""
    pieces = [re.escape(" ".join(piece.split())) for piece in expected.split("…")]
    pattern = re.compile(".*".join(pieces))
    return any(pattern.search(" ".join(line.split())) for line in lines)


def running_step(out_path):
    """The number of the last step that began, from the output so far (None: none yet)."""
    last = None
    for line in out_path.read_text(errors="replace").splitlines():
        if line.startswith(BEGIN):
            last = int(line.split()[1])
    return last


def node_pids(directory):
    """The pids in every cluster.json below `directory`, by the file's directory."""
    clusters = {}
    for path in directory.rglob("cluster.json"):
        try:
            description = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        clusters[path.parent] = [node["pid"] for node in description.get("nodes", [])]
    return clusters


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != b"Z"


def stray_nodes(directory):
    """Node processes still running with a properties file below `directory`: the tour's
    nodes (each `python -m kraftcore.cli.main start DIR/kc/node-N/server.properties`)."""
    prefix = str(directory) + os.sep
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "kraftcore.cli.main" in args and "start" in args and \
                any(arg.startswith(prefix) for arg in args):
            pids.append(int(entry.name))
    return pids


def stop_everything(shell, directory, env, clusters):
    """Stop what the tour started: each cluster with `kraftcore cluster down`, then the
    tour's shell and its background jobs (the supervisor stops its nodes on SIGTERM), then
    any node left, by its pid."""
    clusters = {**clusters, **node_pids(directory)}
    for cluster in clusters:
        if (cluster / "cluster.json").exists():
            subprocess.run([str(ROOT / ".venv/bin/kraftcore"), "cluster", "down", "--dir",
                            str(cluster)], env=env, capture_output=True, timeout=STOP_S)
    if shell.poll() is None:
        os.killpg(shell.pid, signal.SIGTERM)
        try:
            shell.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    deadline = time.monotonic() + STOP_S
    left = {pid for pids in clusters.values() for pid in pids} | set(stray_nodes(directory))
    while any(alive(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_tour_block_is_there_and_covers_the_tour():
    commands = " ".join(command for command, _ in tour(README.read_text(encoding="utf-8")))
    for part in ("kraftcore cluster up", "kraftcore topics create", "kraftcore topics list",
                 "kraftcore topics describe", "kraftcore quorum describe", "kraftcore verify",
                 "kraftcore cluster down"):
        assert part in commands, f"the README's tour no longer runs {part!r}"


def test_the_readme_is_short_and_names_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert re.search(r"^make demo ", text, re.M) and re.search(r"^make test ", text, re.M)


def test_the_readme_tour_runs_as_written(tmp_path):
    if not (ROOT / ".venv/bin/activate").exists():
        pytest.skip("the tour activates .venv, which `make` creates")
    steps = tour(README.read_text(encoding="utf-8"))
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "KRAFTCORE_SPARK_CDS": "0"}
    env.pop("VIRTUAL_ENV", None)
    (tmp_path / "tour.sh").write_text(script(steps))
    out_path, err_path = tmp_path / "tour.out", tmp_path / "tour.err"
    clusters = {}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        shell = subprocess.Popen(["bash", str(tmp_path / "tour.sh")], cwd=ROOT, env=env,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True)
        try:
            deadline = time.monotonic() + TOUR_S
            step, step_began = None, time.monotonic()
            while shell.poll() is None:
                now = time.monotonic()
                current = running_step(out_path)
                if current != step:
                    step, step_began = current, now
                if now > deadline or now - step_began > STEP_S:
                    break
                clusters.update(node_pids(tmp_path))  # noted while the files exist
                time.sleep(0.5)
            timed_out = shell.poll() is None
        finally:
            stop_everything(shell, tmp_path, env, clusters)

    output = out_path.read_text(errors="replace")
    found = sections(output)
    stderr_tail = "\n".join(err_path.read_text(errors="replace").splitlines()[-30:])
    for number, (command, expected) in enumerate(steps):
        status, lines = found.get(number, (None, []))
        context = (f"tour step {number + 1}: {command}\n--- its output:\n" + "\n".join(lines)
                   + f"\n--- the tour's stderr (last lines):\n{stderr_tail}")
        if status is None:
            pytest.fail((f"did not finish within {STEP_S} s (or the tour's {TOUR_S} s)\n"
                         if timed_out else "never ran or was cut short\n") + context)
        assert status == 0, f"exited with status {status}\n{context}"
        for line in expected:
            assert shows(line, lines), f"does not print {line!r}\n{context}"
    assert not stray_nodes(tmp_path)
