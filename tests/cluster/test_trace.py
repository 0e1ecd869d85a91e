"""The eliot trace a message carries across hops (``_log.trace_here`` and
``continue_trace``): one trace uuid however many hops, and a bounded depth."""

from __future__ import annotations

from eliot import start_action

from actorctl._log import MAX_TRACE_DEPTH, continue_trace, trace_here


def test_a_long_chain_of_hops_keeps_one_trace_and_a_bounded_depth() -> None:
    # Given a first hop sent inside an action
    with start_action(action_type="test:first"):
        trace = trace_here()
    assert trace is not None
    uuid = trace.partition("@")[0]
    depths = []
    # When 500 hops each continue the trace they got, and send on from an action in it
    for _ in range(500):
        with continue_trace(trace), start_action(action_type="test:hop"):
            trace = trace_here()
        assert trace is not None
        depths.append(trace.count("/"))
    # Then every hop is in the same trace, and none nests past the bound
    assert trace.partition("@")[0] == uuid
    assert max(depths) <= MAX_TRACE_DEPTH + 2
    assert min(depths[MAX_TRACE_DEPTH:]) < max(depths)  # it went back to the root


def test_outside_any_action_nothing_is_traced_and_a_malformed_trace_changes_nothing() -> None:
    assert trace_here() is None
    for bad in (None, 3, "no-at-sign", "uuid@level-without-slash", "@/1", "a@/x"):
        with continue_trace(bad):
            assert trace_here() is None
