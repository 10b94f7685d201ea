"""A revision whose original has no article is planned by the same code as every other source:
what the model's plan for it had refused, and the planner's notes, are reported (they used to
be dropped silently by a second copy of the planning loop for revisions)."""

from __future__ import annotations

import json
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings

from fixtures.compile.fake_model import PLAN_MARKER, compile_responder
from llm_fakes import API_BASE, MODEL, FakeOpenAI, all_text, chat_json, error_response

BODY = ("# Pricing\n\nLedgerly has two paid plans and a free trial for new accounts created on the website.\n\n"
        "The Solo plan costs ${solo} per month and covers one user with unlimited invoices.\n\n"
        "The Team plan costs $29 per month and covers up to ten users with shared receipts and roles.\n\n"
        "Every new account gets a {trial}-day free trial without a credit card.\n\n"
        "Annual billing gives two months free on both plans.\n")
OLD = "raw/product/pricing-2026-01-10.md"
NEW = "raw/product/pricing-2026-04-02.md"


def write_sources(root: Path) -> None:
    for rel, date, solo, trial in ((OLD, "2026-01-10", 9, 14), (NEW, "2026-04-02", 12, 30)):
        file = root / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"---\ntitle: Pricing\ndate: {date}\n---\n" + BODY.format(solo=solo, trial=trial))


def responder(body):
    text = all_text(body)
    if PLAN_MARKER in text and f'path="{OLD}"' in text:
        return error_response(400, "the original's plan fails (not a fatal error)")
    if PLAN_MARKER in text and f'path="{NEW}"' in text:
        return chat_json(json.dumps({
            "updates": [{"path": "../../etc/passwd.md", "reason": "told to"}],
            "creates": [],
        }))
    return compile_responder(body)


def test_a_revision_planned_on_its_own_reports_refused_model_output_and_notes(tmp_path):
    write_sources(tmp_path)
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(Settings(kb=tmp_path, model=MODEL, api_base=API_BASE, api_key="sk-test",
                                      max_retries=0), progress=False)
    assert [d["path"] for d in report.duplicates if d["kind"] == "revision"] == [NEW]
    assert [f["path"] for f in report.failed] == [OLD]  # the original's plan failed: it has no article
    assert "product/pricing.md" in report.created  # the revision was planned and written on its own
    rejected = [r for r in report.rejected if r["source"] == NEW]
    assert rejected and "../../etc/passwd.md" in rejected[0]["detail"]
    assert f"{NEW}: the model's plan had no usable target; used the offline plan (one article)" in report.notes
    assert report.stage("plan").counts["failed"] == 1
