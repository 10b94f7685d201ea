"""``kaas mcp`` over stdio answers every request it can address, whatever the line looks like,
and logs (on stderr, never stdout) each line it cannot answer: a client never waits forever for a
reply, and nothing is dropped without a word."""

from __future__ import annotations

import pytest

from helpers import McpStdio
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


@pytest.fixture
def session(sample_kb):
    started = McpStdio(sample_kb.root)
    yield started
    if started.process.poll() is None:
        started.close()


ANSWERED = [  # (line, id, error code, words in the message)
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"caf\xe9"}}', 1, PARSE_ERROR, "not UTF-8"),
    (b'{"jsonrpc":"2.0","id":"s\xff","method":"ping"}', "s\ufffd", PARSE_ERROR, "not UTF-8"),
    (b'[{"jsonrpc":"2.0","id":2,"method":"ping"}]', 2, INVALID_REQUEST, "batches are not supported"),
    (b'{"jsonrpc":"2.0","id":3,"method":"ping",', 3, PARSE_ERROR, "not valid JSON"),
    (b'{"jsonrpc":"1.0","id":4,"method":"ping"}', 4, INVALID_REQUEST, "not a JSON-RPC message"),
    (b'{"jsonrpc":"2.0","id":5,"method":7}', 5, INVALID_REQUEST, "not a JSON-RPC message"),
    (b'{"jsonrpc":"2.0","id":6}', 6, INVALID_REQUEST, "not a JSON-RPC message"),
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}', 7, INVALID_REQUEST, "not a JSON-RPC message"),
]
UNANSWERABLE = [  # (line, words in the warning on stderr)
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', "id is dict"),
    (b'{"jsonrpc":"2.0","id":[1],"method":"tools/call","params":{"name":"ask_and_save","arguments":{"question":"x"}}}', "id is list"),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', "id is float"),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', "id is bool"),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', "id is null"),
    (b"[]", "batch"),
    (b"42", "not a JSON object"),
    (b"not json at all", "not valid JSON"),
]


def test_every_request_with_a_usable_id_is_answered(session):
    for line, request_id, code, words in ANSWERED:
        session.send(line)
        answer = session.receive()
        assert answer is not None, f"no answer to {line!r}"
        assert answer["id"] == request_id and answer["error"]["code"] == code, (line, answer)
        assert words in answer["error"]["message"], (line, answer)
    session.send('{"jsonrpc":"2.0","id":99,"method":"ping"}')
    assert session.receive() == {"jsonrpc": "2.0", "id": 99, "result": {}}  # still serving
    assert "Traceback" not in session.close()


def test_a_batch_answers_each_of_its_requests(session):
    session.send(b'[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},'
                 b'{"jsonrpc":"2.0","id":"b","method":"tools/list"}]')
    answers = [session.receive(), session.receive()]
    assert [a["id"] for a in answers] == ["a", "b"]
    assert all(a["error"]["code"] == INVALID_REQUEST for a in answers)
    stderr = session.close()
    assert "batch" in stderr and "Traceback" not in stderr


def test_lines_without_a_usable_id_are_logged_on_stderr_never_answered_or_run(session, sample_kb):
    for line, _words in UNANSWERABLE:
        session.send(line)
    session.send('{"jsonrpc":"2.0","id":100,"method":"ping"}')
    answer = session.receive()
    assert answer == {"jsonrpc": "2.0", "id": 100, "result": {}}, answer  # nothing else came first
    stderr = session.close()
    warnings = [line for line in stderr.splitlines() if line.startswith("kaas: warning:")]
    assert len(warnings) >= len(UNANSWERABLE), stderr
    for _line, words in UNANSWERABLE:
        assert words in stderr, (words, stderr)
    assert not (sample_kb.wiki_dir / "answers").exists()  # the ask_and_save with a list id never ran
