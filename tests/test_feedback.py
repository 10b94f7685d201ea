"""``kaas feedback``: the questions voted down in the chat (``.kaas/feedback.jsonl``), most recent
first, with the pages read and cited; the file bounded and damaged lines counted, not fatal."""

from __future__ import annotations

import datetime as dt
import json
import re

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.quality import feedback
from kb_ai.quality.feedback import Retention, feedback_record, record_feedback

from helpers import build_kb


def _vote(state, vote, question, minute, *, user="rita", retention=Retention(), **extra):
    payload = {"vote": vote, "question": question, "pages": ["a/one.md", "b/two.md"], "citations": ["a/one.md"], **extra}
    now = dt.datetime(2026, 11, 30, 12, minute, tzinfo=dt.timezone.utc)
    record_feedback(state, feedback_record(payload, user, now=now), retention, now=now)


def test_kaas_feedback_lists_the_failed_questions(tmp_path):
    state = tmp_path / ".kaas"
    _vote(state, "down", "Who signs invoices?", 1, comment="it cited the wrong page")
    _vote(state, "up", "Where is the kettle?", 2)
    _vote(state, "down", "How much is Solo?", 3)
    _vote(state, "up", "who signs  invoices?", 4)
    with (state / "feedback.jsonl").open("a") as handle:
        handle.write("{not json\n")
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "4 votes (2 up, 2 down)" in text and "1 lines could not be read" in text
    assert text.index("Who signs invoices?") < text.index("How much is Solo?")  # most recent vote first
    assert "Where is the kettle?" not in text
    assert "pages read: a/one.md, b/two.md" in text and "cited: a/one.md" in text
    assert "comment: it cited the wrong page" in text
    data = json.loads(CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback", "--json"]).stdout)
    assert [q["question"] for q in data["failed_questions"]] == ["Who signs invoices?", "How much is Solo?"]
    assert data["failed_questions"][0]["down"] == 1 and data["failed_questions"][0]["up"] == 1


def test_the_feedback_file_is_bounded(tmp_path):
    small = Retention(max_bytes=2000)
    for minute in range(30):
        _vote(tmp_path, "down", f"question number {minute}", minute, retention=small)
    lines = (tmp_path / "feedback.jsonl").read_text().splitlines()
    assert (tmp_path / "feedback.jsonl").stat().st_size <= 2000 and not (tmp_path / "feedback.1.jsonl").exists()
    assert json.loads(lines[-1])["question"] == "question number 29"  # the newest kept, the oldest dropped
    assert all(json.loads(line) for line in lines) and json.loads(lines[0])["question"] != "question number 0"


def test_one_users_flood_pushes_out_only_their_own_votes(tmp_path):
    """Bounded per user and in total: the total is cut from whoever holds the most bytes, so
    another user's votes survive any flood; each user keeps their newest ``per_user``."""
    limits = Retention(per_user=40, max_bytes=30_000)
    _vote(tmp_path, "down", "Who signs invoices?", 0, user="ana", retention=limits)
    _vote(tmp_path, "up", "Where is the kettle?", 1, user="carl", retention=limits)
    for n in range(120):
        _vote(tmp_path, "down", f"flood {n}", 2, user="bob", comment="x" * 1500, retention=limits)
    records = [json.loads(line) for line in (tmp_path / "feedback.jsonl").read_text().splitlines()]
    assert [r["question"] for r in records if r["user"] != "bob"] == ["Who signs invoices?", "Where is the kettle?"]
    flood = [r["question"] for r in records if r["user"] == "bob"]
    assert 0 < len(flood) <= 40 and flood[-1] == "flood 119" and flood == sorted(flood, key=lambda q: int(q.split()[1]))
    assert (tmp_path / "feedback.jsonl").stat().st_size <= 30_000
    # Past the count alone (the file far from full): the user's own oldest goes first.
    per_user = Retention(per_user=3)
    for n in range(5):
        _vote(tmp_path / "b", "up", f"q{n}", n, user="bob", retention=per_user)
    _vote(tmp_path / "b", "up", "mine", 6, user="ana", retention=per_user)
    kept = [json.loads(line) for line in (tmp_path / "b" / "feedback.jsonl").read_text().splitlines()]
    assert [(r["user"], r["question"]) for r in kept] == [("bob", "q2"), ("bob", "q3"), ("bob", "q4"), ("ana", "mine")]


def test_votes_older_than_the_retention_are_dropped(tmp_path):
    when = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
    record_feedback(tmp_path, feedback_record({"vote": "down", "question": "old one"}, "ana", now=when - dt.timedelta(days=400)),
                    now=when - dt.timedelta(days=400))
    record_feedback(tmp_path, feedback_record({"vote": "down", "question": "recent"}, "ana", now=when - dt.timedelta(days=10)),
                    now=when - dt.timedelta(days=10))
    record_feedback(tmp_path, feedback_record({"vote": "up", "question": "today"}, "carl", now=when), now=when)
    assert [r["question"] for r in map(json.loads, (tmp_path / "feedback.jsonl").read_text().splitlines())] == [
        "recent", "today"]


def test_an_earlier_versions_older_file_is_read_and_merged(tmp_path):
    older = {"time": "2026-11-30T12:00:00Z", "vote": "down", "question": "from before", "user": "ana"}
    (tmp_path / "feedback.1.jsonl").write_text(json.dumps(older) + "\n")
    (tmp_path / "feedback.jsonl").write_text(json.dumps({**older, "question": "after that"}) + "\n")
    assert [q.question for q in feedback.feedback_report(tmp_path).questions] == ["after that", "from before"]
    _vote(tmp_path, "down", "now", 5)
    assert not (tmp_path / "feedback.1.jsonl").exists()
    assert [q.question for q in feedback.feedback_report(tmp_path).questions] == ["now", "after that", "from before"]


def test_no_feedback_yet(tmp_path):
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback"])
    assert result.exit_code == 0 and "0 votes" in result.stdout and "no question was voted down" in result.stdout


def test_the_failed_questions_can_be_run_again_with_kaas_eval(sample_kb):
    state = sample_kb.root / ".kaas"
    _vote(state, "down", "How are citations validated?", 1)
    out = sample_kb.root / "failed.jsonl"
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "feedback", "--questions", str(out)])
    assert result.exit_code == 0 and "wrote 1 questions" in result.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "feedback-1", "question": "How are citations validated?"}]
    evaluated = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", str(out), "--offline"])
    assert evaluated.exit_code == 0, evaluated.output
    assert re.search(r"questions +1 +1 answerable", evaluated.stdout), evaluated.stdout


FLOODER = "flooder-token-0123456789abcdef"
VOTER = "voter-token-0123456789abcdef"
OTHER = "other-token-0123456789abcdef"
USERS = f"""
[users.cy]
token = "{OTHER}"

[users.ana]
token = "{VOTER}"

[users.bob]
token = "{FLOODER}"
"""


def _flood(client, votes: int, token: str = FLOODER, **texts) -> list[int]:
    vote = {"vote": "down", "pages": ["ops/deployment.md"], **texts}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return [client.post("/api/feedback", headers=headers, content=json.dumps(
        {"question": f"flood {n}", **vote}, ensure_ascii=False).encode("utf-8")).status_code for n in range(votes)]


def test_one_user_flooding_votes_cannot_erase_another_users_vote(tmp_path):
    """Issue 25: about 200 votes of ~55 kB from one reader in 2 s rotated every earlier vote out
    of both files. Now a vote is at most 16 kB stored (413 beyond), one user casts at most
    ``user_vote_rate`` a minute (429 beyond), and what the file drops is that user's own."""
    from starlette.testclient import TestClient

    from kb_ai.config import Settings
    from kb_ai.server import create_app

    build_kb(tmp_path / "kb", toml=USERS)
    with TestClient(create_app(Settings(kb=tmp_path / "kb"), mcp=False)) as client:
        mine = client.post("/api/feedback", json={"vote": "down", "question": "Who signs invoices?", "comment": "wrong page"},
                           headers={"Authorization": f"Bearer {VOTER}"})
        assert mine.status_code == 201
        large = _flood(client, 200, answer="語" * 18_000)  # 54 kB in UTF-8: within the old limits
        full = _flood(client, 50, OTHER, comment="x" * 1900, answer="y" * 1900, question="q" * 3900)
        limited = client.post("/api/feedback", json={"vote": "up", "question": "q"}, headers={"Authorization": f"Bearer {FLOODER}"})
    assert set(large[:20]) == {413} and set(large[20:]) == {429}  # too large; then past user_vote_rate, 20 a minute
    assert full.count(201) == 20 and set(full[20:]) == {429}
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited" and limited.headers["retry-after"]
    report = feedback.feedback_report(tmp_path / "kb" / ".kaas")
    assert "Who signs invoices?" in [q.question for q in report.questions]


def test_past_its_rate_limit_a_flood_still_erases_only_its_own_votes(tmp_path):
    """With the rate limit off, the retention alone keeps another user's vote: at most
    ``feedback_user_votes`` of the flooder's are kept, the newest."""
    from starlette.testclient import TestClient

    from kb_ai.server import create_app

    build_kb(tmp_path / "kb", toml="user_vote_rate = 0\nfeedback_user_votes = 30\n" + USERS)
    from kb_ai.config import load_settings

    settings = load_settings(tmp_path / "kb", env={})
    assert (settings.user_vote_rate, settings.feedback_user_votes) == (0, 30)
    with TestClient(create_app(settings, mcp=False)) as client:
        client.post("/api/feedback", json={"vote": "down", "question": "Who signs invoices?"},
                    headers={"Authorization": f"Bearer {VOTER}"})
        assert set(_flood(client, 100, comment="x" * 1900)) == {201}
    records = [json.loads(line) for line in (tmp_path / "kb" / ".kaas" / "feedback.jsonl").read_text().splitlines()]
    assert [r["question"] for r in records if r["user"] == "ana"] == ["Who signs invoices?"]
    assert [r["question"] for r in records if r["user"] == "bob"] == [f"flood {n}" for n in range(70, 100)]
