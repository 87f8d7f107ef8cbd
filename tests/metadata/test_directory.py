"""`kraftcore.metadata.directory` assembles an image from what `kraftcore.log.metadata_dir`
reads and reads no file itself (docs/architecture.md: the metadata layer takes bytes). Its
loading behaviour is tested through the metadata shell (tests/cli/test_metadata_shell.py)."""

import ast
import inspect

from kraftcore.log import metadata_dir
from kraftcore.metadata import directory


def test_the_metadata_directory_loader_opens_no_file():
    tree = ast.parse(inspect.getsource(directory))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"os", "os.path", "io", "pathlib", "shutil", "kraftcore.log.fileio"}
    calls = {node.func.id for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "open" not in calls


def test_its_public_functions_stay_where_callers_find_them():
    assert directory.find_metadata_dir is metadata_dir.find_metadata_dir
    for name in ("load_directory", "load_snapshot_file", "assemble", "snapshot_image",
                 "Loaded"):
        assert hasattr(directory, name)
