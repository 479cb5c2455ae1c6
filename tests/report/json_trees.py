"""Hypothesis strategies for JSON values: what the JSON writer and reader tests feed."""

from __future__ import annotations

from hypothesis import strategies as st

json_leaves = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=6)
json_trees = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)
