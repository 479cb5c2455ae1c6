"""Reading a result with its long lists left in the file: what `read_json.load` gives
equals what `json.loads` gives, for any document, written by lightspeed or not."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_trees import json_trees

from lightspeed.report import read_json, render_json

objects = st.dictionaries(st.text(max_size=4), json_trees, min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(json_trees, st.lists(st.lists(objects | json_trees, max_size=4), min_size=1, max_size=3))
def test_a_written_document_reads_back_as_json_loads_reads_it(
    tree: Any, lists: list[list[Any]]
) -> None:
    doc = {"tree": tree, "first": lists[0], "nested": [{"more": s} for s in lists[1:]]}
    streamed = {
        "tree": tree,
        "first": render_json.Streamed(len(lists[0]), lists[0].__getitem__),
        "nested": [{"more": render_json.Streamed(len(s), s.__getitem__)} for s in lists[1:]],
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "doc.json"
        render_json.write(path, streamed)
        loaded = read_json.load(path)
        assert loaded == json.loads(path.read_bytes()) == json.loads(json.dumps(doc))
        # Lists of objects, one a line, stay in the file (where one list holds something
        # else, the file is read whole).
        if lists[0] and all(isinstance(x, dict) and x for s in lists for x in s):
            assert isinstance(loaded["first"], read_json.OnDisk)
            assert list(loaded["first"]) == lists[0]
        # Nor does any other layout of the same document read otherwise.
        path.write_text(json.dumps(doc))
        assert read_json.load(path) == json.loads(json.dumps(doc))
        path.write_text(json.dumps(doc, indent=1))
        assert read_json.load(path) == json.loads(json.dumps(doc))


def _steps_file(path: Path, items: list[dict[str, Any]]) -> Path:
    render_json.write(
        path, {"schema_version": 4, "steps": render_json.Streamed(len(items), items.__getitem__)}
    )
    return path


def test_a_long_list_is_read_in_order_in_blocks_and_item_by_item(tmp_path: Path) -> None:
    items = [{"step": i, "name": "é" * (i % 5)} for i in range(3 * read_json._LINES_A_READ + 7)]
    steps = read_json.load(_steps_file(tmp_path / "r.json", items))["steps"]
    assert isinstance(steps, read_json.OnDisk) and len(steps) == len(items)
    assert list(steps) == items and steps == items
    assert steps[-1] == items[-1] and steps[300] == items[300] and steps[5:9] == items[5:9]
    with pytest.raises(IndexError):
        steps[len(items)]


def test_a_damaged_list_is_refused_as_json_loads_refuses_it(tmp_path: Path) -> None:
    path = _steps_file(tmp_path / "r.json", [{"step": 1}, {"step": 2}, {"step": 3}])
    text = path.read_text()
    for damaged in (
        text.replace('{"step":1},', '{"step":1}'),  # a comma missing between items
        text.replace('{"step":3}', '{"step":3},'),  # one after the last
    ):
        path.write_text(damaged)
        with pytest.raises(json.JSONDecodeError):
            read_json.load(path)
    # An item damaged inside is found when it is read.
    path.write_text(text.replace('{"step":2}', '{"step":2,}'))
    steps = read_json.load(path)["steps"]
    assert steps[0] == {"step": 1}
    with pytest.raises(ValueError):
        list(steps)


def test_a_list_whose_file_changed_since_it_was_read_is_refused(tmp_path: Path) -> None:
    path = _steps_file(tmp_path / "r.json", [{"step": 1}, {"step": 2}])
    steps = read_json.load(path)["steps"]
    _steps_file(path, [{"step": 7}, {"step": 8}, {"step": 9}])
    with pytest.raises(ValueError, match="changed since it was read"):
        steps[0]
