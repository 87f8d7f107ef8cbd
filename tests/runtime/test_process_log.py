"""A node process's log file (`kraftcore start --log-file`): rotated by size, keeping a
bounded number of older files, with the process's stdout and stderr in the same file.
Each case runs in a child process, since the log takes over file descriptors 1 and 2."""

import subprocess
import sys
import textwrap

WAIT_S = 60

CHILD = textwrap.dedent("""
    import logging, sys
    from kraftcore.runtime import process_log
    process_log.use_log_file(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                             level=logging.INFO,
                             formatter=process_log.formatter("text", 7))
    log = logging.getLogger("kraftcore.test")
    for i in range(int(sys.argv[4])):
        log.warning("line %05d %s", i, "x" * 60)
    print("printed last", flush=True)
    sys.stderr.write("stderr last\\n")
""")


def run_child(path, bytes_max, backups, lines):
    return subprocess.run([sys.executable, "-c", CHILD, str(path), str(bytes_max),
                           str(backups), str(lines)], capture_output=True, text=True,
                          timeout=WAIT_S)


def test_a_flood_of_log_lines_is_rotated_and_bounded(tmp_path):
    path = tmp_path / "node.log"
    result = run_child(path, 4096, 2, 2000)  # ~200 KiB of lines
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""  # all of it went to the file
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["node.log", "node.log.1", "node.log.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 4096 + 200
    current = path.read_text()
    assert "node-7 WARNING kraftcore.test: line 01999" in current
    assert current.endswith("printed last\nstderr last\n")
    # The files hold the newest lines, in order, oldest in the highest suffix.
    older = (tmp_path / "node.log.2").read_text() + (tmp_path / "node.log.1").read_text()
    numbers = [int(line.split("line ")[1][:5]) for line in (older + current).splitlines()
               if "line " in line]
    assert numbers == list(range(numbers[0], 2000))


def test_a_small_log_is_appended_to_and_not_rotated(tmp_path):
    path = tmp_path / "node.log"
    path.write_text("before\n")
    assert run_child(path, 1 << 20, 3, 10).returncode == 0
    text = path.read_text()
    assert text.startswith("before\n") and text.count("kraftcore.test") == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.log"]


def test_start_refuses_log_file_settings_out_of_range(tmp_path):
    config = tmp_path / "node.properties"
    config.write_text("node.id=1\n")
    for flags, message in ((["--log-file-max-bytes", "100"], "at least 4096 bytes"),
                           (["--log-file-backups", "0"], "at least 1 backup")):
        result = subprocess.run(
            [sys.executable, "-m", "kraftcore.cli.main", "start", str(config), "--log-file",
             str(tmp_path / "node.log"), *flags], capture_output=True, text=True,
            timeout=WAIT_S)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert message in result.stderr and not (tmp_path / "node.log").exists()


def test_json_lines_carry_time_level_node_logger_and_message():
    import json
    import logging

    from kraftcore.runtime import process_log

    fmt = process_log.formatter("json", 3)
    record = logging.LogRecord("kraftcore.raft", logging.INFO, __file__, 1,
                               "node %s: leader change: %s", (3, "naïve \"q\""), None)
    line = json.loads(fmt.format(record))
    assert line["level"] == "INFO" and line["node"] == 3 and line["logger"] == "kraftcore.raft"
    assert line["message"] == 'node 3: leader change: naïve "q"'
    assert line["time"].endswith("+00:00") and "T" in line["time"]
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "ValueError: boom" in json.loads(fmt.format(failed))["exception"]
    import pytest
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        process_log.formatter("xml", 3)
