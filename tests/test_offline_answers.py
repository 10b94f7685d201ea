"""Offline answers that state the fact, say when the wiki does not know, and suggest related pages
(issue 15), through the real CLI, HTTP chat and MCP client on small wikis written here.

Each answer-bearing unit kind is asked for once: a default in a short sentence, a list item with
its lead-in, a heading with its first line, a table row with its header, a code block, a sentence
holding "a.k.a.". Abstention: nonsense is not answered (a distinct ``abstained`` result in --json,
SSE and MCP), a question with a rare word the wiki holds is."""

from __future__ import annotations

import json

from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import load_settings
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server

from helpers import assert_weak_match, build_kb, page_refs
from server_fakes import parse_sse

POOL = ("storage/connection-pool.md", "Connection pool", "How the server keeps database connections.",
        "# Connection pool\n\nThe server keeps a pool of open database connections and hands one to each "
        "request.\n\nThe maximum number of connections in the pool. Defaults to `500`.\n\n"
        "Idle connections are closed after a while.\n")
BACKENDS = ("storage/backends.md", "Storage backends", "Where the server stores its records.",
            "# Storage backends\n\nRecords are written through one interface whatever the store.\n\n"
            "The server supports three storage backends:\n\n- Postgres, for production\n- SQLite, for tests\n"
            "- Memory\n\nEach backend is chosen in the settings file.\n")
VARIABLES = ("ops/variables.md", "Environment variables", "The variables the server reads at start.",
             "# Environment variables\n\nThe server reads these at start.\n\n### `GLIMMER_PORT`\n\n"
             "The port to listen on.\n\n### `GLIMMER_HOST`\n\nThe address to bind, loopback unless set.\n")
LIMITS = ("ops/limits.md", "Limits", "Timeouts and retries of outgoing calls.",
          "# Limits\n\nOutgoing calls are bounded.\n\n| Setting | Default |\n| --- | --- |\n"
          "| timeout | 30 seconds |\n| retries | 3 |\n")
INSTALL = ("ops/frobnicator.md", "Frobnicator", "Installing the frobnicator tool.",
           "# Frobnicator\n\nThe frobnicator tidies records.\n\nTo get it:\n\n```bash\npip install frobnicator\n```\n")
WRITERS = ("people/twain.md", "Samuel Clemens", "An American writer.",
           "# Samuel Clemens\n\nSamuel Clemens, a.k.a. Mark Twain, wrote Tom Sawyer in a house by the river. "
           "He also piloted steamboats on the Mississippi.\n")
BANANAS = ("plants/banana-virus.md", "Banana bunchy top virus", "A plant virus of bananas.",
           "# Banana bunchy top virus\n\nThe banana bunchy top virus stunts banana plants and spreads by aphids.\n")


def _kb(tmp_path, *pages):
    return build_kb(tmp_path, POOL, BACKENDS, VARIABLES, LIMITS, INSTALL, WRITERS, BANANAS, *pages)


def _ask_json(kb, question: str, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", question, "--json", *args], env={"KAAS_MODEL": ""})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _first_bullet(answer: str) -> str:
    """The answer's first bullet (its first line: the answer carries no line about its mode)."""
    return ("\n" + answer).split("\n- ")[1]


def _bullet_with(answer: str, *needles: str) -> str:
    """The one answer line holding every needle (they must be quoted together, in one unit)."""
    lines = [line for line in answer.splitlines() if all(n in line for n in needles)]
    assert lines, f"no line of the answer holds {needles}:\n{answer}"
    return lines[0]


def test_a_default_in_a_short_sentence_is_quoted_with_its_neighbour(tmp_path):
    out = _ask_json(_kb(tmp_path), "What is the default maximum number of connections in the pool?")
    line = _bullet_with(out["answer"], "maximum number of connections", "Defaults to `500`")
    assert line.endswith("[Connection pool](storage/connection-pool.md)")
    assert out["abstained"] is False


def test_a_list_item_keeps_its_lead_in(tmp_path):
    kb = _kb(tmp_path)
    out = _ask_json(kb, "Which storage backends does the server support? Is Postgres one?")
    _bullet_with(out["answer"], "The server supports three storage backends:", "Postgres, for production")
    # Asked for the list, the answer quotes it whole, once.
    whole = _ask_json(kb, "Which storage backends are there?")
    line = _bullet_with(whole["answer"], "three storage backends:", "Postgres, for production", "SQLite, for tests",
                        "Memory")
    assert sum("SQLite" in other for other in whole["answer"].splitlines()) == 1, line


def test_a_heading_is_quoted_with_the_line_under_it(tmp_path):
    out = _ask_json(_kb(tmp_path), "What is GLIMMER_PORT?")
    _bullet_with(out["answer"], "GLIMMER_PORT", "The port to listen on.")


def test_a_table_row_is_quoted_with_its_header(tmp_path):
    regions = ("ops/regions.md", "Regions", "Where the servers run.",
               "# Regions\n\nServers run in two regions.\n\nRegion | Datacenter\n--- | ---\neu | Frankfurt\nus | Virginia\n")
    kb = _kb(tmp_path, regions)
    out = _ask_json(kb, "What is the default timeout of outgoing calls?")
    _bullet_with(out["answer"], "Setting: timeout", "Default: 30 seconds")
    # A table without outer pipes is a table too.
    out = _ask_json(kb, "Which datacenter serves the eu region?")
    _bullet_with(out["answer"], "Region: eu; Datacenter: Frankfurt")


def test_code_answers_how_do_i(tmp_path):
    out = _ask_json(_kb(tmp_path), "How do I install the frobnicator?")
    _bullet_with(out["answer"], "To get it: `pip install frobnicator`")  # with the line that introduces it
    assert {"path": "ops/frobnicator.md", "title": "Frobnicator"} in page_refs(out["citations"])


def test_a_k_a_does_not_split_a_sentence(tmp_path):
    out = _ask_json(_kb(tmp_path), "Who wrote Tom Sawyer?")
    _bullet_with(out["answer"], "Samuel Clemens, a.k.a. Mark Twain, wrote Tom Sawyer")


def test_nonsense_is_not_answered_and_says_so_distinctly(tmp_path):
    kb = _kb(tmp_path)
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "How tall is the Eiffel Tower in bananas?"))
    out = _ask_json(kb, "How tall is the Eiffel Tower?")  # no page holds any of its words
    assert out["abstained"] is True and out["match"] == "none"
    assert out["pages"] == [] and out["citations"] == []
    assert out["answer"].startswith("The wiki does not cover this.")
    assert "banana" not in out["answer"].split("Related pages")[0].lower()  # nothing quoted as an answer
    assert all(set(r) == {"path", "title"} for r in out["related"])
    # A question whose rare word the wiki holds is answered, not abstained on.
    rare = _ask_json(kb, "How does the frobnicator get installed?")
    assert rare["abstained"] is False and rare["citations"]
    # ... and so is one whose plain words ("use") no page of a small wiki holds.
    plain = _ask_json(kb, "How do I use offline mode?")
    assert plain["abstained"] is False and {"path": "ops/configuration.md", "title": "Configuration"} in page_refs(plain["citations"])


def test_the_abstained_event_over_http_and_mcp(tmp_path):
    kb = _kb(tmp_path)
    with TestClient(create_app(load_settings(kb.root, env={}), mcp=False)) as client:
        events = parse_sse(client.post("/api/chat", json={"question": "What colour is the smell of a Tuesday?"}).text)
        answered = parse_sse(client.post("/api/chat", json={"question": "What is GLIMMER_PORT?"}).text)
    names = [name for name, _ in events]
    assert "abstained" in names and names.index("abstained") < names.index("token")
    assert [name for name, _ in answered if name == "abstained"] == []

    import anyio

    async def call() -> dict:
        async with Client(build_mcp_server(load_settings(kb.root, env={}))) as client:
            result = await client.call_tool("ask", {"question": "Which planet did the French Revolution orbit?"})
            answered = await client.call_tool("ask", {"question": "What is the default timeout of outgoing calls?"})
        return {"abstained": result.structured_content, "answered": answered.structured_content}

    data = anyio.run(call)
    assert data["abstained"]["abstained"] is True and data["abstained"]["citations"] == []
    assert data["answered"]["abstained"] is False and data["answered"]["citations"]


def test_follow_ups_follow_links_from_the_quoted_passage_never_saved_answers_or_repeats(tmp_path):
    linked = ("storage/replication.md", "Replication", "Copies of the records on other machines.",
              "# Replication\n\nEach record is copied to two other machines.\n")
    pool = ("storage/connection-pool.md", "Connection pool", "How the server keeps database connections.",
            "# Connection pool\n\nThe maximum number of connections in the pool. Defaults to `500`. "
            "Connections are shared with [replication](replication.md).\n")
    saved = ("answers/what-about-httpx.md", "What is the connection pool of HTTPX??",
             "Saved answer to the question: What is the connection pool of HTTPX??",
             "# What is the connection pool of HTTPX??\n\nThe pool holds 500 connections "
             "[Connection pool](../storage/connection-pool.md).\n",
             {"topic": "answers", "kind": "answer", "citations": ["storage/connection-pool.md"]})
    twin = ("ops/connection-pool-notes.md", "Connection pool", "Notes on the pool.", "# Connection pool\n\nNotes.\n")
    # One round of reading: a second round (multi-hop, navigate/rounds.py) would read the linked
    # page, and a page read is not a follow-up.
    kb = build_kb(tmp_path, pool, linked, saved, twin, BACKENDS, LIMITS, toml="max_rounds = 1\n")
    out = _ask_json(kb, "What is the maximum number of connections in the pool?", "--suggest")
    suggestions = out["suggestions"]
    assert suggestions and suggestions[0] == "What does the wiki say about Replication?"
    assert not any("HTTPX" in s for s in suggestions)
    assert len(set(suggestions)) == len(suggestions)
    assert not any("Connection pool" in s for s in suggestions)  # the question's own subject


def test_eval_reports_facts_held_and_abstention_with_gold_pages_deleted(tmp_path):
    kb = _kb(tmp_path)
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"id": "pool", "question": "What is the default maximum number of connections in the pool?",
         "gold_pages": ["storage/connection-pool.md"], "facts": ["500"]},
        {"id": "timeout", "question": "What is the default timeout of outgoing calls?",
         "gold_pages": ["Limits"], "facts": ["timeout", "30 seconds"]},
        {"id": "port", "question": "What is GLIMMER_PORT?", "gold_pages": ["ops/variables.md"],
         "facts": ["port to listen on"]},
    ]) + "\n")
    nonsense = tmp_path / "nonsense.jsonl"
    # No page holds any of its words (one that shares a word is a weak answer since issue 26).
    nonsense.write_text(json.dumps({"question": "How tall is the Eiffel Tower?", "answerable": False}) + "\n")
    runner = CliRunner()
    env = {"KAAS_MODEL": ""}

    def run(*args: str) -> dict:
        out = tmp_path / "report.json"
        result = runner.invoke(cli, ["--kb", str(kb.root), "eval", *args, "--json-out", str(out)], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text())["summary"]

    answered = run(str(questions))
    assert answered["facts_held"] == 1.0 and answered["questions_with_facts"] == 3
    assert answered["false_abstention_rate"] == 0.0
    assert run(str(nonsense))["abstention_rate"] == 1.0
    before = sorted(p.relative_to(kb.root) for p in (kb.root / "wiki").rglob("*.md"))
    deleted = run(str(questions), "--delete-gold")
    # Since issue 26 only a question no remaining page shares an informative word with is refused
    # ("GLIMMER_PORT" is on no other page); the other two are answered as weak matches.
    assert deleted["unanswerable"] == 3 and deleted["abstention_rate"] == 1 / 3
    assert sorted(p.relative_to(kb.root) for p in (kb.root / "wiki").rglob("*.md")) == before  # a copy was used


def test_a_unit_that_says_it_is_prefixed_by_its_subject(tmp_path):
    airport = ("places/logan-airport.md", "Logan International Airport", "An airport in Boston.",
               "# Logan International Airport\n\nLogan International Airport is in East Boston. "
               "It is the largest airport in the New England region and the 17th busiest in the country.\n")
    out = _ask_json(build_kb(tmp_path, airport), "Which is the largest airport in the New England region?")
    # the sentence is shown with what names its subject: the page's title before it, or the
    # sentence before it that names the subject, quoted with it as one pair
    _bullet_with(out["answer"], "Logan International Airport", "It is the largest airport in the New England region")


def test_each_unit_knows_its_page_heading_and_exact_quote(tmp_path):
    """What a passage-level citation needs: the unit's page, the heading it sits under (as the
    rendered page titles it), and its quote, the page text exactly."""
    from kb_ai.offline.units import page_units
    from kb_ai.server.render import render_markdown

    body = ("# Café\n\nThe café opens at 7.\n\n## Prix & *horaires*\n\nCoffee costs 2 euros. Tea too.\n\n"
            "## Drinks\n\n| Drink | Price |\n| --- | --- |\n| tea | 2 |\n\n## `OPEN_DAYS`\n\n- Open daily\n")
    units = page_units("food/cafe.md", "Café", body)
    titles = [entry.title for entry in render_markdown(body, from_path="food/cafe.md", exists=lambda _p: True).toc]
    assert {u.heading for u in units} <= set(titles)
    assert [u.heading for u in units if u.kind == "table-row"] == ["Drinks"]
    assert [u.heading for u in units if "Coffee" in u.text][0] == "Prix & horaires"
    assert all(body[u.start:u.end] == u.quote and u.path == "food/cafe.md" for u in units)


def test_quoted_code_cannot_close_its_fence_early(tmp_path):
    tricky = ("ops/fences.md", "Fences", "Writing fenced blocks.",
              "# Fences\n\nTo write a fence block, type:\n\n````\nfence start\n~~~~\n[x](javascript:alert(1))\n~~~~\n````\n")
    out = _ask_json(build_kb(tmp_path, tricky), "How do I write a fence block?")
    lines = out["answer"].splitlines()
    opening = next(i for i, line in enumerate(lines) if line.strip().startswith("~~~~~"))
    fence = lines[opening].strip()
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].strip() == fence)
    assert "  ~~~~" in lines[opening + 1:closing] and "  [x](javascript:alert(1))" in lines[opening + 1:closing]
    assert page_refs(out["citations"]) == [{"path": "ops/fences.md", "title": "Fences"}]


def test_a_code_block_matches_as_well_as_the_sentence_that_introduces_it(tmp_path):
    """A sentence ending in ":" and the code block under it are one unit (the code, quoted with its
    lead-in): the code's own lines must not rank that unit below a sentence that only refers back
    to the code ("The snippet above ...") — as a reST literal block read whole (issue 14) did."""
    quota = ("ops/attachments.md", "Attachments", "What a client may attach to a message.",
             "# Attachments\n\nEach client sends attachments with its messages. But how do you limit the size of "
             "attachments? The relay accepts attachments of any size by default, but you can limit their size by "
             "setting the `MAX_PARCEL` option:\n\n```\nfrom courier import Courier, Options\n\n"
             "courier = Courier(__name__)\ncourier.options['MAX_PARCEL'] = 8 * 1000 * 1000\n```\n\n"
             "The snippet above limits their size to 8 megabytes.\n")
    out = _ask_json(_kb(tmp_path, quota), "How do I limit the size of attachments?")
    assert "courier.options['MAX_PARCEL'] = 8 * 1000 * 1000" in out["answer"], out["answer"]
    _bullet_with(out["answer"], "you can limit their size by setting the `MAX_PARCEL` option:")  # with its lead-in


LIT = ("music/lit.md", "Lit (band)", "An American rock band.",
       "# Lit (band)\n\nLit is an American rock band from Fullerton, California. The band was formed in 1988 "
       "by the brothers A. Jay and Jeremy Popoff.\n")
ADORABLE = ("music/adorable.md", "Adorable (band)", "An English band.",
            "# Adorable (band)\n\nAdorable were an English band from Coventry, formed in 1990.\n")
BLUR = ("music/blur.md", "Blur (band)", "An English band.",
        "# Blur (band)\n\nBlur are an English band from London, known for Britpop.\n")


def test_a_date_comparison_names_the_earlier_with_both_years_quoted_and_cited(tmp_path):
    kb = _kb(tmp_path, LIT, ADORABLE, BLUR)
    first = _ask_json(kb, "Which band was formed first, Lit or Adorable?")
    verdict = first["answer"].splitlines()[0]
    assert verdict.startswith("Lit (band), by the years quoted below: Lit (band) (1988) comes before "
                              "Adorable (band) (1990).") and "Derived from the quoted passages" in verdict
    assert {"music/lit.md", "music/adorable.md"} <= {c["path"] for c in page_refs(first["citations"])}
    assert _bullet_with(first["answer"], "formed in 1988", "(music/lit.md)")
    assert _bullet_with(first["answer"], "formed in 1990", "(music/adorable.md)")
    later = _ask_json(kb, "Which band was formed more recently, Lit or Adorable?")
    assert later["answer"].splitlines()[0].startswith("Adorable (band), by the years quoted below")
    # No year on one page: no verdict, only the quotes.
    unsure = _ask_json(kb, "Which band was formed first, Lit or Blur?")
    assert "Derived from the quoted passages" not in unsure["answer"] and "comes before" not in unsure["answer"]
    # "the first ..." ranks things; it asks for no date comparison.
    rank = _ask_json(kb, "Which was the first band to play in Coventry, Lit or Adorable?")
    assert "comes before" not in rank["answer"]


def test_a_both_question_is_answered_yes_only_when_each_page_states_it(tmp_path):
    kb = _kb(tmp_path, LIT, ADORABLE, BLUR)
    yes = _ask_json(kb, "Are Lit and Adorable both bands?")
    assert yes["answer"].splitlines()[0].startswith("Yes: the pages of both Lit (band) and Adorable (band) say so")
    assert {"music/lit.md", "music/adorable.md"} <= {c["path"] for c in page_refs(yes["citations"])}
    # Only Lit's page says "rock": no verdict either way (a page that does not say it is no "no").
    unsure = _ask_json(kb, "Are Lit and Adorable both rock bands?")
    assert "Yes:" not in unsure["answer"] and "Derived from" not in unsure["answer"]


CROWELL = ("people/zach-crowell.md", "Zach Crowell", "An American record producer.",
           "# Zach Crowell\n\nZach Crowell is an American record producer and songwriter from Nashville.\n")
VARTAN = ("people/vartan-malakian.md", "Vartan Malakian", "An Armenian painter.",
          "# Vartan Malakian\n\nVartan Malakian is an Armenian painter, the father of Daron Malakian, the guitarist "
          "and record producer of System of a Down.\n")


def test_a_subject_no_page_names_is_not_covered_though_its_words_are_elsewhere(tmp_path):
    kb = _kb(tmp_path, CROWELL, VARTAN)
    # "Zach" is on Zach Crowell's page, "Bogosian" nowhere: the wiki does not know Zach Bogosian.
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "Which is a record producer, Zach Bogosian or Zach Malakian?"))
    # Both subjects named by some page: answered.
    known = _ask_json(kb, "Which is a record producer, Zach Crowell or Daron Malakian?")
    assert known["abstained"] is False and known["citations"]


def test_question_names_are_quoted_titles_and_capitalised_runs_and_a_page_names_them_as_a_phrase():
    from kb_ai.offline.names import mentions, page_terms, question_names  # new in issue 15's second pass

    def texts(question):
        return [n.text for n in question_names(question)]

    assert texts("Which band was formed first, Lit or Adorable?") == ["Lit", "Adorable"]
    assert texts('Is the Battle of Stones River older than "Big Stone Gap"?') == ["Big Stone Gap", "Battle of Stones River"]
    assert texts("He was born on 6 March 1937 in Lawrence, Kansas.") == ["Lawrence", "Kansas"]
    assert texts("Both Sorbaria and Goldenrod are genera?") == ["Sorbaria", "Goldenrod"]
    name = question_names("Which team is the 1974 Texas Tech Raiders?")[0]
    assert name.text == "Texas Tech Raiders"
    assert mentions(page_terms("The Texas Tech Red Raiders football team"), name)  # two adjacent words of three
    bogosian = question_names("Is Zach Bogosian a producer?")[0]
    assert not mentions(page_terms("Zach Crowell", "Zach Crowell works with Bogosian."), bogosian)
    assert mentions(page_terms("Hockey", "Zach Bogosian plays hockey."), bogosian)


KISS = ("film/kiss-and-tell.md", "Kiss and Tell (1945 film)", "A 1945 comedy film.",
        "# Kiss and Tell (1945 film)\n\nKiss and Tell is a 1945 American comedy film in which Shirley Temple "
        "played Corliss Archer, a teenage girl.\n")
TEMPLE = ("people/shirley-temple.md", "Shirley Temple", "An American actress and diplomat.",
          "# Shirley Temple\n\nShirley Temple Black was an American actress who held the government position "
          "of Chief of Protocol of the United States.\n")


def test_a_two_hop_question_is_covered_by_the_page_its_best_match_names(tmp_path, monkeypatch):
    # Coverage looks at the best keyword match only here (a large wiki: the second hop's page is
    # not among the best matches); the page it names completes the question.
    monkeypatch.setattr("kb_ai.offline.coverage.CANDIDATES", 1)
    films = ("film/cinema.md", "Cinema", "Films and where they are played.",
             "# Cinema\n\nA film is played in a cinema. Films are played on screens.\n")
    kb = _kb(tmp_path, KISS, TEMPLE, films)
    out = _ask_json(kb, "What government position did the woman who played Corliss Archer hold?")
    assert out["abstained"] is False
    assert "Chief of Protocol" in out["answer"]


def test_many_rare_words_do_not_cover_a_question_none_of_whose_names_the_wiki_mentions(tmp_path):
    kb = _kb(tmp_path)
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "What is the maximum size of a connection pool page in the Zorblax Quantum server records?"))


def test_code_inside_a_blockquote_is_a_code_unit_not_prose(tmp_path):
    """reST docs put doctests under a note or an indented paragraph: the compiled page holds
    ``> ```python`` / ``> >>> ...`` lines. They are code, quoted as code with their lead-in, never a
    sentence of ``> >>>`` marks; the blockquote's prose before the fence stays a sentence."""
    from kb_ai.offline.units import page_units

    body = ("# Keys\n\nYou can use the `ciph.makekeys` function to create a keypair:\n\n"
            "> ```python\n> >>> import ciph\n> >>> (pub, priv) = ciph.makekeys(512, workers=8)\n> ```\n\n"
            "> **Warning:** `makekeys()` is slow on one core. Reuse the keys:\n>\n> ```\n"
            "> keys = ciph.makekeys(512)\n> # Keep them for later\n>\n> store(keys)\n> ```\n")
    units = page_units("crypto/keys.md", "Keys", body)
    assert all(body[u.start:u.end] == u.quote for u in units)
    code = [u for u in units if u.kind == "code"]
    assert [u.text for u in code] == [
        ">>> import ciph\n>>> (pub, priv) = ciph.makekeys(512, workers=8)",
        "keys = ciph.makekeys(512)\n# Keep them for later\nstore(keys)"]
    assert code[0].lead == "You can use the `ciph.makekeys` function to create a keypair:"  # inline code kept
    assert not any(">>>" in u.text or "```" in u.text for u in units if u.kind != "code")
    assert any(u.kind == "sentence" and u.text.startswith("Warning: `makekeys()` is slow on one core.") for u in units)
    # A blockquote's empty line ">" parts two paragraphs; its markers are never part of a unit's text.
    note = ("# TLS\n\n> **Note:** *New in version 1.25:*\n>\n> HTTPS connections are now verified\n"
            "> by default (`cert_reqs = \"CERT_REQUIRED\"`).\n")
    texts = [u.text for u in page_units("net/tls.md", "TLS", note)]
    assert "HTTPS connections are now verified by default (`cert_reqs = \"CERT_REQUIRED\"`)." in texts, texts
    assert not any(">" in text for text in texts), texts

    keys = ("crypto/keys.md", "Keys", "Making keys.", body)
    out = _ask_json(_kb(tmp_path, keys), "Which parameter of makekeys uses several workers?")
    assert "(pub, priv) = ciph.makekeys(512, workers=8)" in out["answer"], out["answer"]
    assert "> >>>" not in out["answer"]


def test_a_line_of_a_long_code_block_is_quoted_as_its_whole_statement(tmp_path):
    """A code block too long to quote whole is quoted statement by statement: a call spread over
    lines is one unit, never its first line ``retries=Retry(`` alone; a comment alone or a block
    header ("try:") is no unit of its own, a class is quoted with its body (a doctest's with its
    "..." lines); comments closing the block stay with the last statement."""
    from kb_ai.offline.units import page_units

    body = ("# Retries\n\nExamples:\n\n```python\nimport fetchlib\n\n# Make the request\nresp = fetchlib.request(\n"
            "    \"GET\",\n    \"https://example.com/redirect/3\",\n    retries=fetchlib.Retry(3, redirect=2)\n)\n"
            "try:\n    fetchlib.request(\"GET\", \"https://nx.example.com\", retries=False)\n"
            "except fetchlib.NewConnectionError:\n    print(\"Connection failed.\")\n"
            "class PizzaAuth(AuthBase):\n    \"\"\"Pizza authentication.\"\"\"\n    def __call__(self, r):\n"
            "        return r\n>>> class MyAuth(AuthBase):\n...     pass\nprint(resp.status)\n# 302\n```\n")
    texts = [u.text for u in page_units("net/retries.md", "Retries", body) if u.kind == "code"]
    assert texts == [
        "import fetchlib",
        "# Make the request\nresp = fetchlib.request(\n    \"GET\",\n    \"https://example.com/redirect/3\",\n"
        "    retries=fetchlib.Retry(3, redirect=2)\n)",
        "try:\n    fetchlib.request(\"GET\", \"https://nx.example.com\", retries=False)",
        "except fetchlib.NewConnectionError:\n    print(\"Connection failed.\")",
        "class PizzaAuth(AuthBase):\n    \"\"\"Pizza authentication.\"\"\"\n    def __call__(self, r):\n        return r",
        ">>> class MyAuth(AuthBase):\n...     pass",
        "print(resp.status)\n# 302"]
    # A statement longer than a quotable block: only its lines that stand alone, never "settings = {".
    long_dict = "# Settings\n\n```python\nsettings = {\n" + "".join(f"    \"key{n}\": {n},\n" for n in range(9)) + "}\n```\n"
    texts = [u.text for u in page_units("s.md", "Settings", long_dict) if u.kind == "code"]
    assert texts == [f"\"key{n}\": {n}," for n in range(9)]


def test_follow_ups_are_never_double_question_marks_nor_pages_unrelated_by_score(tmp_path):
    """A page titled as a question is suggested as that question ("Why migrate?", not "What does
    the wiki say about Why migrate??"); pages of the quoted page's topic folder come first; a
    keyword match from elsewhere far below the best one is no follow-up."""
    pool = ("storage/connection-pool.md", "Connection pool", "How the server keeps database connections.",
            "# Connection pool\n\nThe maximum number of connections in the pool. Defaults to `500`.\n")
    faq = ("storage/why-slow.md", "Why is the server slow at start?", "Start-up questions.",
           "# Why is the server slow at start?\n\nIt warms its caches first.\n")
    release = ("notes/release.md", "Release notes", "What changed.",
               "# Release notes\n\nThe number of the release is 4. The server starts faster.\n")
    kb = build_kb(tmp_path, pool, faq, release, toml="max_rounds = 1\n")
    out = _ask_json(kb, "What is the maximum number of connections in the pool?", "--suggest")
    assert "Why is the server slow at start?" in out["suggestions"], out["suggestions"]
    assert not any("??" in s for s in out["suggestions"]), out["suggestions"]
    assert not any("Release notes" in s for s in out["suggestions"]), out["suggestions"]
    # Near means the quoted page's topic folder first: a page of storage/ before a better keyword
    # match of another folder (a release-notes page matching common words is no follow-up).
    replicas = ("storage/replicas.md", "Replicas", "Copies of the records.", "# Replicas\n\nTwo copies are kept.\n")
    noisy = ("notes/changes.md", "Changes", "What changed.",
             "# Changes\n\nThe maximum number of connections in the pool of the old server changed.\n")
    kb = build_kb(tmp_path / "near", pool, replicas, noisy, toml="max_rounds = 1\n")
    out = _ask_json(kb, "What is the maximum number of connections in the pool?", "--suggest")
    assert out["suggestions"][0] == "What does the wiki say about Replicas?", out["suggestions"]

    from kb_ai.navigate.offline_navigator import about

    assert about("Why should I migrate to Charset-Normalizer?") == "Why should I migrate to Charset-Normalizer?"
    assert about("Replication") == "What does the wiki say about Replication?"
    assert about("Installation:") == "What does the wiki say about Installation?"


def test_follow_ups_read_as_questions():
    """Issue 28 item 9: a title that is a question already is offered as that question (with its
    "?"), never as "What does the wiki say about Why not ...?"; a title that is a sentence is no
    follow-up at all."""
    from kb_ai.navigate.offline_navigator import about

    assert about("Why not pip") == "Why not pip?"
    assert about("How to migrate from chardet.") == "How to migrate from chardet?"
    assert about("Does the pool retry?") == "Does the pool retry?"
    assert about("Connection pooling") == "What does the wiki say about Connection pooling?"
    assert about("The pool keeps ten idle connections open for each host by default.") is None
    assert about("Pools keep idle sockets open") == "What does the wiki say about Pools keep idle sockets open?"
    assert about("   ") is None


FROB = ("tools/frob-shortlog.md", "frob shortlog", "Summarising the history of a frob repository.",
        "# frob shortlog\n\nThe frob shortlog command summarises the history, grouped by author.\n\n"
        "The `--group` option groups the summary by another field, such as the committer.\n\n"
        "The `--numbered` option sorts the output by the number of commits per author.\n")


def test_an_option_no_page_mentions_is_a_subject_the_wiki_lacks(tmp_path):
    """An identifier the question writes as code ("--sentiment", "push.useBitmaps", "sign_hash") is
    the exact thing asked about: when no page mentions it, the question is not covered, though its
    other words ("frob shortlog ... print") are all on one page."""
    from kb_ai.offline.names import question_names

    assert [n.text for n in question_names("Does push.useBitmaps or sign_hash or --no-recurse, e.g. getSizeOf?")] == [
        "push.useBitmaps", "sign_hash", "--no-recurse", "getSizeOf"]
    kb = _kb(tmp_path, FROB)
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "What does frob shortlog --sentiment print?"))
    real = _ask_json(kb, "What does frob shortlog --group print?")
    assert real["abstained"] is False and "--group" in real["answer"]


def test_which_flag_is_answered_by_the_code_that_names_it(tmp_path):
    """"Which flag / option / parameter ...?" asks for a name written as code: a line of a help
    text (a code block) that gives it is not ranked down as code nobody asked for, and a unit
    writing the name as code is preferred to sentences that only restate the question's words."""
    cli = ("tools/sniff-cli.md", "Sniffer command line", "The sniff command.",
           "# Sniffer command line\n\nThe sniff tool detects the charset of a file and prints the detected charset "
           "with other details as JSON.\n\nYou may invoke sniff with the help flag to see every option.\n\n"
           "Sniff reads the file once and prints the charset it detected.\n\n```\nusage: sniff [-h] [-m] [-r] file\n\n"
           "  -h, --help     show this help message and exit\n  -m, --minimal  Only print the charset detected. No JSON.\n"
           "  -r, --replace  Replace the file instead of writing a new one.\n  -v, --verbose  Print the steps of the detection.\n"
           "  -t, --threshold  Maximum amount of chaos allowed.\n  -a, --alternatives  Print other possible charsets.\n"
           "  -f, --force    Replace without asking.\n  --version      Show the version and exit.\n```\n")
    out = _ask_json(_kb(tmp_path, cli), "Which sniff flag prints only the detected charset?")
    assert "--minimal" in out["answer"], out["answer"]


def test_a_question_every_name_of_which_no_page_mentions_is_not_covered(tmp_path):
    """"What is the default port of the Zorblatt web interface?": every other word is on one page
    (the share rule alone would cover it), but the one thing it names is nowhere in the wiki."""
    console = ("ops/console.md", "Web console", "The admin web interface.",
               "# Web console\n\nThe web interface of the server listens on port 8080 by default.\n")
    kb = _kb(tmp_path, console)
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "What is the default port of the Zorblatt web interface?"))
    asked = _ask_json(kb, "What is the default port of the web interface?")
    assert asked["abstained"] is False and "8080" in asked["answer"]


def test_which_release_names_the_release_the_entry_is_listed_under(tmp_path):
    """"Which release added ...?" on release notes: the entry never says its version, the page's
    title (or the heading it sits under, in a changelog) does, and the answer shows it."""
    notes = ("releases/frob-v2-38.md", "Frob v2.38 Release Notes", "What changed in Frob 2.38.",
             "# Frob v2.38 Release Notes\n\n## UI, Workflows & Features\n\n"
             "- \"frob grep -m<max-hits>\" is a way to limit the hits shown per file.\n"
             "- \"frob mv\" moves paths between sparse directories.\n")
    changes = ("releases/changes.md", "Changes", "The changelog of zorp.",
               "# Changes\n\n## 1.4.0 (2023-04-26)\n\n- Added the `--dry-run` option to zorp sync.\n\n"
               "## 1.3.0 (2022-11-02)\n\n- Dropped support for Python 3.7.\n")
    kb = _kb(tmp_path, notes, changes)
    out = _ask_json(kb, "Which frob release added grep -m to limit the hits shown per file?")
    _bullet_with(out["answer"], "2.38 (Frob v2.38 Release Notes):", "limit the hits shown per file")
    out = _ask_json(kb, "In which version was the --dry-run option of zorp sync added?")
    _bullet_with(out["answer"], "1.4.0 (2023-04-26):", "--dry-run")
    # Not asked for a release: no prefix.
    out = _ask_json(kb, "How do I limit the hits shown per file with frob grep?")
    assert "Frob v2.38 Release Notes)" not in out["answer"] and "Frob v2.38 Release Notes:" not in out["answer"]


WARNINGS = ("tools/frob-warnings.md", "Frobnicator warnings", "Warnings the frobnicator prints.",
            "# Frobnicator warnings\n\nThe frobnicator prints a StaleRecordWarning for every stale record it "
            "finds.\n\nIf you understand the risk, you can disable these warnings with "
            "`frob.disable_warnings()`.\n\nStale records are kept until the next tidy run.\n")
SERVE = ("ops/serving.md", "Serving", "How the server accepts connections.",
         "# Serving\n\nThe server accepts connections from clients once it has started.\n\n"
         "Clients connect over HTTP and keep the connection open between requests.\n\n"
         "Pass `--host 0.0.0.0` to bind to every IP of the machine; by default only loopback is bound.\n\n"
         "Each client may open several connections to the server at once.\n")


def test_a_question_in_other_words_than_the_page_is_answered_by_the_page(tmp_path):
    """The question says "silence" and "all addresses" / "hosts", the page "disable" and "bind to
    every IP" (offline/equivalents.py): the page's line is quoted, not an abstention nor a line
    that only repeats the question's other words."""
    kb = _kb(tmp_path, WARNINGS, SERVE)
    silence = _ask_json(kb, "How can I silence the frobnicator StaleRecordWarning?")
    assert silence["abstained"] is False, silence["answer"]
    _bullet_with(silence["answer"], "disable these warnings", "frob.disable_warnings()")
    accept = _ask_json(kb, "How do I make the server accept connections on all addresses?")
    assert accept["abstained"] is False, accept["answer"]
    _bullet_with(accept["answer"], "--host 0.0.0.0", "to bind to every IP")
    # the line that says it in other words comes before the one that repeats the question's words
    hosts = _ask_json(kb, "How can clients connect to the server from other hosts?")
    assert "--host 0.0.0.0" in _first_bullet(hosts["answer"]), hosts["answer"]


def test_a_comparison_by_price_is_answered_by_the_prices_the_page_states(tmp_path):
    """"Which plan is cheaper, Solo or Team?": no page says "cheaper", the pricing page says what
    each costs; a comparison's adjective stands for the measure (offline/equivalents.py), so the
    question is covered and the prices are quoted. Nonsense asking a price is still not covered."""
    pricing = ("product/pricing.md", "Pricing", "What each plan costs.",
               "# Pricing\n\nThe Solo plan costs $12 per month and covers one user.\n\n"
               "The Team plan costs $29 per month and covers up to ten users.\n")
    others = [("team/onboarding.md", "Onboarding", "The first week of a new hire.",
               "# Onboarding\n\nEvery new team member gets a laptop and a buddy; the team plans the first week.\n"),
              ("product/roadmap.md", "Roadmap", "What the team plans next.",
               "# Roadmap\n\nThe team plans offline receipts for every plan this year.\n"),
              ("support/faq.md", "Support FAQ", "Common questions.",
               "# Support FAQ\n\nSupport answers every plan within a day; the Team plan gets a named contact.\n")]
    kb = build_kb(tmp_path, pricing, *others, sample=False)  # a wiki about one product: "plan" and "team" are everywhere
    out = _ask_json(kb, "Which plan is cheaper, Solo or Team?")
    assert out["abstained"] is False, out["answer"]
    assert "$12" in out["answer"] and "$29" in out["answer"], out["answer"]
    # Since issue 26: some page shares its informative words, so it is answered as a weak match
    # (labelled), not refused; "not covered" is for a question no page shares a word with.
    assert_weak_match(_ask_json(kb, "How expensive is a banana on the Eiffel Tower?"))


def test_equivalent_words_do_not_make_nonsense_look_covered(tmp_path):
    """Nonsense built from the table's own words ("switch off", "launch", "silence") is still
    not covered: an equivalent counts half, and only where the question's subject is held."""
    kb = _kb(tmp_path, WARNINGS, SERVE)
    for question in ("How do I switch off the moon's gravity on Tuesdays?",
                     "Who invented the taste of silence?",
                     "When did the banana launch its first rocket to Mars?"):
        # Since issue 26: answered as a weak match (labelled), not refused: some page shares a word.
        assert_weak_match(_ask_json(kb, question))


def test_turn_on_and_turn_off_find_enable_and_disable_not_each_other(tmp_path):
    """A phrasal verb is matched whole: "turn on" stands for "enable", "turn off" for "disable"."""
    cache = ("ops/result-cache.md", "Result cache", "The cache of computed results.",
             "# Result cache\n\nTo disable the result cache, set `RESULT_CACHE=0` in the settings file.\n\n"
             "To enable the result cache, set `RESULT_CACHE=1` in the settings file.\n")
    kb = _kb(tmp_path, cache)
    on = _ask_json(kb, "How do I turn on the result cache?")
    assert "RESULT_CACHE=1" in _first_bullet(on["answer"]), on["answer"]
    off = _ask_json(kb, "How do I turn off the result cache?")
    assert "RESULT_CACHE=0" in _first_bullet(off["answer"]), off["answer"]


def test_the_sentence_after_the_one_repeating_the_question_gives_the_value_it_asks_for(tmp_path):
    """"Which setting ...?" / "What is the default ...?": the sentence that repeats the question's
    words only names the topic; the next sentence of its paragraph gives the name or value
    (`spool_workers=4`, `90 seconds`). The answer quotes them together, in one unit, instead of the
    topic sentence alone, the value without what it is for, or a sentence with another name."""
    export = ("ops/exporter.md", "Exporter", "Exporting the archive of the mailbox.",
              "# Exporter\n\nThe exporter writes the mailbox archive to disk.\n\n"
              "If a smaller archive is fine, you can pass `compact=True` to make the archive export faster.\n\n"
              "Another way to make the archive export faster is to run several exports in parallel "
              "to make the archive export faster. A laptop should set `spool_workers=4` and a large "
              "server can set `spool_workers=16`.\n\n"
              "The flush of idle sessions to the archive happens on a schedule in the background of the exporter. "
              "Unless configured otherwise, that happens every 90 seconds.\n")
    kb = _kb(tmp_path, export)
    named = _ask_json(kb, "Which setting runs several exports in parallel to make the archive export faster?")
    _bullet_with(named["answer"], "several exports in parallel", "spool_workers=4")
    value = _ask_json(kb, "What is the default schedule of the flush of idle sessions to the archive?")
    _bullet_with(value["answer"], "flush of idle sessions", "90 seconds")


def test_how_do_i_quotes_the_code_even_when_a_sentence_already_used_its_words(tmp_path):
    """"How do I ...?" asks for code. A warning that repeats the question's words is picked
    first; the code block that does it uses the same words, so it adds no new term, but it is
    the first code of the answer: it is what was asked, not a repeat of what was said."""
    mirror = ("ops/mirror.md", "Mirror", "Keeping a local mirror of the archive.",
              "# Mirror\n\nThe mirror copies the files of the archive.\n\n## Checks\n\n"
              "Note that when `checksum` is set to `False`, the mirror will accept any file the server "
              "sends without verifying it and will ignore files whose checksum does not match, which will "
              "make the mirror unsafe.\n\n"
              "The mirror can also ignore verifying the checksum of the files if you set `checksum` to False:\n\n"
              "```\n>>> mirror.sync('https://archive.example.org', checksum=False)\n```\n\n"
              "To skip the files the mirror already holds when a sync resumes, use:\n\n"
              "```\n>>> files = mirror.listing()\n>>> mirror.resume(skip_present=True)\n>>> print(len(files))\n```\n")
    out = _ask_json(_kb(tmp_path, mirror), "How do I make the mirror skip verifying the files' checksum?")
    assert "checksum=False" in out["answer"], out["answer"]


POLLER = ("ops/poller.md", "Poller", "How the poller fetches feeds.",
          "# Poller\n\nThe poller fetches every feed on a schedule and keeps a cache of the results.\n\n"
          "## Polling and caching\n\n"
          "By default the poller retries a feed 3 times and caches each result for a minute.\n\n"
          "To disable all polling and caching logic specify `refresh=False`:\n\n"
          "```python\nimport poller\n\npoller.fetch(\n    \"https://feeds.example.org/a\",\n    refresh=False\n)\n"
          "# FeedNotFetched\n\nfeed = poller.fetch(\n    \"https://feeds.example.org/b\",\n    refresh=False\n)\n\n"
          "print(feed.status)\n# 304\n```\n\n"
          "To disable caching but keep the polling logic, specify `cache=False`:\n\n"
          "```python\nfeed = poller.fetch(\"https://feeds.example.org/a\", cache=False)\n```\n\n"
          "For example, to poll at most 3 times but cache only 2 results:\n\n"
          "```python\npoller.fetch(\"https://feeds.example.org/a\", refresh=poller.Refresh(3, cache=2))\n```\n")


def test_a_lead_in_that_writes_the_code_itself_is_the_answer_when_its_block_is_too_long(tmp_path):
    """"Specify `refresh=False`:" introduces a code block too long to quote whole; the sentence
    alone still writes the answer, so it is not ranked down as a lead-in that shows nothing (a
    lead-in quoted with its short block is: the block unit carries it)."""
    kb = _kb(tmp_path, POLLER)
    out = _ask_json(kb, "How do I turn off both polling and caching in the poller?")
    _bullet_with(out["answer"], "disable all polling and caching", "refresh=False")
    assert "\n- To disable caching but keep the polling logic, specify cache=False: [" not in out["answer"], \
        out["answer"]  # the short block's lead-in, if quoted, comes with its block


def test_short_options_are_terms_of_the_question(tmp_path):
    """"What do frob -q and frob -x mean?": one-letter options are all the question names; the
    entry that writes them is quoted, not one about the same command's other words."""
    notes = ("releases/frob-3-1.md", "Frob 3.1 release notes", "What changed in Frob 3.1.",
             "# Frob 3.1 release notes\n\n## Updates since Frob 3.0\n\n"
             "- \"frob -q\" and \"frob -x\" are now understood as \"frob --quiet\" and \"frob --expand\".\n"
             "- \"frob sync\" learned to mean what the user says since Frob 3.0.\n"
             "- \"frob log\" now means the whole history, as it did before Frob 3.0.\n"
             "- The meaning of \"frob tag\" in scripts changed since Frob 3.0.\n")
    kb = _kb(tmp_path, notes)
    out = _ask_json(kb, "What do frob -q and frob -x mean since Frob 3.0?")
    assert "--quiet" in _first_bullet(out["answer"]), out["answer"]


def test_a_camelcase_name_in_the_question_meets_its_words_in_the_page(tmp_path):
    """"How can I silence the StaleRecordWarning?": the page names the class once, then says "these
    warnings"; the parts of a CamelCase name count (at the weight of an equivalent word), so the
    line that shows how to mute them is quoted, not only the one defining the class."""
    warnings = ("tools/frob-warnings.md", "Frobnicator warnings", "Warnings the frobnicator prints.",
                "# Frobnicator warnings\n\n## Record warnings\n\n"
                "The frobnicator issues several warnings about records, to be resolved in different ways.\n\n"
                "- **`StaleRecordWarning`**: This happens when a record is read from a frobnicator store "
                "that was not tidied. Follow the tidy guide to resolve this.\n\n"
                "Reading untidied stores is **strongly** discouraged; however, if you understand the risks "
                "and wish to disable these warnings, you can use `mute_warnings`:\n\n"
                "```python\nimport frobnicator\n\nfrobnicator.mute_warnings()\n```\n\n"
                "You can also suppress the output of the frobnicator at the interpreter level with the -q flag.\n\n"
                "To disable tidying but keep the records, specify `tidy=False`:\n\n"
                "```python\nfrob.run(tidy=False)\n```\n")
    kb = _kb(tmp_path, warnings)
    out = _ask_json(kb, "How can I silence the frobnicator's StaleRecordWarning?")
    _bullet_with(out["answer"], "mute_warnings")


def test_a_minimum_is_answered_by_the_bound_the_page_states(tmp_path):
    """"Which version ... at minimum?": the page states the lower bound as "18 or later", in none of
    the question's words, while other sentences repeat "require", "minimum" and "version" with
    other numbers; the stated bound is quoted. A maximum finds "up to 8" the same way (quoted
    after a sentence holding "maximum" and "plugin")."""
    upgrade = ("ops/upgrading-glimmer-3.md", "Upgrading to glimmer 3", "What changed in glimmer 3.",
               "# Upgrading to glimmer 3\n\n## Requirements\n\nHere is what changed in glimmer 3:\n\n"
               "- The runtime must be Node 18 or later (previously Node 14 and 16).\n"
               "- Removed support for the old plugin format.\n\n## Plugins\n\n"
               "Older plugins require a glimmer version less than 3.0 (ie <3), so pin them.\n\n"
               "The default minimum log level of glimmer 3 is 2.\n\n"
               "A glimmer 3 worker loads plugins in parallel, up to 8 of them at once.\n\n"
               "The maximum plugin version glimmer 3 accepts is set by the manifest, version 2 by default.\n")
    kb = _kb(tmp_path, upgrade)
    low = _ask_json(kb, "Which Node version does glimmer 3 require at minimum?")
    assert "18 or later" in low["answer"], low["answer"]
    high = _ask_json(kb, "What is the maximum number of plugins glimmer 3 handles?")
    assert "up to 8 of them" in high["answer"], high["answer"]
    # "and newer" is a lower bound too; a requirement of another package (">=2.0") is one, but
    # repeats none of the question's subject
    zorp = ("tools/zorp.md", "Zorp", "The zorp tool.",
            "# Zorp\n\nZorp is tested on Linux and macOS.\n\nThe minimum disk space of the zorp cache is "
            "configurable, 1 GB by default.\n\nPlugins of zorp require zorp-core>=2.0 to load.\n\n"
            "Zorp runs on Ruby 3.1 and newer.\n")
    kb = build_kb(tmp_path / "zorp", zorp)
    ruby = _ask_json(kb, "Which Ruby version does zorp require at minimum?")
    assert "3.1 and newer" in _first_bullet(ruby["answer"]), ruby["answer"]


def test_which_release_skips_a_heading_that_names_the_release_before(tmp_path):
    """In the notes of 2.39, "Fixes since v2.38" names the release before: the entry under it was
    fixed in 2.39, which the page's title says; the answer states 2.39, never 2.38."""
    notes = ("releases/frob-v2-39.md", "Frob v2.39 Release Notes", "What changed in Frob 2.39.",
             "# Frob v2.39 Release Notes\n\n## Updates since v2.38\n\n"
             "- \"frob mv\" learned to move paths between sparse directories.\n\n"
             "## Fixes since v2.38\n\n"
             "- \"frob tidy --prune\" would delete pinned records when the store was read-only, which has "
             "been corrected.\n")
    kb = _kb(tmp_path, notes)
    out = _ask_json(kb, "Which frob release corrected frob tidy --prune deleting pinned records?")
    line = _bullet_with(out["answer"], "tidy --prune")
    assert line.startswith("- 2.39 (Frob v2.39 Release Notes): "), out["answer"]
    assert "2.38 (" not in out["answer"], out["answer"]


def test_a_lead_in_naming_code_before_a_table_still_introduces_what_it_does_not_show(tmp_path):
    """"The `zorp.codecs` module offers the following predefined codecs:" writes code, but what it
    introduces is a table, not a code block too long to quote: it is ranked below the row holding
    the asked value, a line that shows nothing (a feature of the scorer: it ends in ":")."""
    codecs = ("tools/zorp-codecs.md", "zorp.codecs -- predefined codecs", "The codecs zorp ships.",
              "# zorp.codecs -- predefined codecs\n\n## Predefined codecs\n\n"
              "The `zorp.codecs` module offers the following predefined codecs:\n\n"
              "| Name | Width | Padding |\n| --- | --- | --- |\n| zorp-8 | 8 | 0x00 |\n| zorp-16 | 16 | 0xFFFF |\n\n"
              "Some common codecs are predefined in `zorp.codecs`.\n")
    kb = _kb(tmp_path, codecs)
    out = _ask_json(kb, "What padding does the predefined zorp-16 codec use?")
    assert "0xFFFF" in _first_bullet(out["answer"]), out["answer"]
    bullets = ("\n" + out["answer"]).split("\n- ")
    lead = next((i for i, b in enumerate(bullets) if "offers the following predefined codecs" in b), len(bullets))
    assert lead > 1, out["answer"]  # the lead-in, if quoted at all, comes after the row


def test_a_lead_in_announcing_the_following_brings_its_list(tmp_path):
    """"The following three kinds of ... are accepted." introduces the list under it as a sentence
    ending in ":" does, though it ends in "." and another sentence follows it: asked which kinds,
    the answer quotes the list with it, not the announcement alone."""
    auth = ("net/frobd-features.md", "Frobd features", "What the frobd server offers.",
            "# Frobd features\n\nfrobd is a small HTTP server with many features.\n\n#### Keep-Alive\n\n"
            "Supports HTTP 1.1 Keep-Alive, keeping the socket open between requests.\n\n"
            "#### Authentication\n\nThe following three kinds of HTTP authentication are accepted. "
            "They work over both HTTP and HTTPS.\n\n* Digest\n* Basic\n* Bearer token\n\n"
            "#### Caching\n\nfrobd can cache responses on disk.\n")
    kb = _kb(tmp_path, auth)
    out = _ask_json(kb, "Which kinds of HTTP authentication does frobd accept?")
    _bullet_with(out["answer"], "Digest", "Basic", "Bearer token")


def test_a_heading_right_above_a_list_is_its_lead_in(tmp_path):
    """A list right under a heading ("### Reader-writer locks") is introduced by the heading: asked
    for what that section offers, the answer quotes the list with its heading."""
    locks = ("tools/zorplock.md", "Zorplock", "Locks for zorp programs.",
             "# Zorplock\n\nA few locking helpers for zorp programs.\n\n### Locking decorator\n\n"
             "- Helpful `locked` decorator (acquires the instance's lock on method entry).\n\n"
             "### Reader-writer locks\n\n- Multiple readers (at the same time).\n"
             "- Single writers (blocking any readers).\n- Helpful `read_locked` and `write_locked` decorators.\n\n"
             "### Inter-process locks\n\n- Single writer using file based locking.\n"
             "- Helpful `interprocess_locked` decorator.\n")
    kb = _kb(tmp_path, locks)
    out = _ask_json(kb, "Which decorators does zorplock provide for reader-writer locks?")
    _bullet_with(out["answer"], "read_locked", "write_locked")
    assert "interprocess_locked" not in _first_bullet(out["answer"]), out["answer"]


def test_who_brings_the_field_line_that_names_the_person(tmp_path):
    """Meeting notes put "Owner: Priya." on the line after the decision: asked who owns it, the
    answer quotes the decision with the field line naming the person, not the decision alone nor
    another line where someone owns something else."""
    notes = ("meetings/notes-2026-q2.md", "Notes 2026 q2", "Planning notes of the second quarter.",
             "# Notes 2026 q2\n\n## 2026-04-02-planning.md\n\n### Q2 planning\n\n"
             "We agreed to ship the export wizard on iOS by May.\n\nOwner: Priya. Budget: one engineer for a month.\n\n"
             "## 2026-05-10-retro.txt\n\nRetro, May\n\nThe export alert was noisy. Sam owns the new alert; "
             "it ships with the next release.\n")
    kb = _kb(tmp_path, notes)
    out = _ask_json(kb, "Who owns shipping the export wizard on iOS?")
    _bullet_with(out["answer"], "export wizard on iOS", "Owner: Priya")


def test_when_is_answered_by_a_duration_or_a_relative_time(tmp_path):
    """"When can ...?" is answered by "after four weeks" as much as by a date. The notes say it on a
    line of its own after the line repeating the question's words ("before joining the pager
    rotation"): the two are quoted together, not the line without the time alone."""
    onboarding = ("team/onboarding.md", "Onboarding", "The first weeks of a new hire.",
                  "# Onboarding\n\nNew hires get a laptop and their accounts on day one.\n\n"
                  "Read the runbooks and the incident reports before joining the pager rotation.\n\n"
                  "Pager duty starts after four weeks; the rotation is one week in five.\n")
    kb = _kb(tmp_path, onboarding)
    out = _ask_json(kb, "When can a new hire join the pager rotation?")
    assert "before joining the pager rotation" in out["answer"] and "after four weeks" in out["answer"], out["answer"]


def test_which_rfc_is_answered_by_the_rfc_the_page_names_in_link_text(tmp_path):
    """"Which RFC ...?" asks for the thing the question names with its number or name after it:
    "as specified in [RFC 9990](...)" holds it (link text is text), a sentence that only shares
    the question's other words does not."""
    frob = ("net/frobnames.md", "Frob names", "The frobnames package.",
            "# Frob names\n\nSupport for the Frob Names protocol as specified in "
            "[RFC 9990](https://tools.ietf.org/html/rfc9990). This is the latest version of the protocol.\n\n"
            "Implementers should use legacy mapping with caution, only where frobnames implementations "
            "that pre-date 2020 must be read.\n\n## Packages\n\nThe latest tagged release of the frobnames "
            "package is published on the package index.\n")
    kb = _kb(tmp_path, frob)
    out = _ask_json(kb, "Which RFC does the frobnames package implement?")
    assert "RFC 9990" in out["answer"], out["answer"]


def test_a_python_version_is_python_and_its_number_not_another_version(tmp_path):
    """"What is the minimum Python version for zorp?" names the thing whose version it asks: "Python
    3.9+" answers it, "Version 2.0" of a license does not, though it holds the word "version"."""
    zorp = ("tools/zorp-tab.md", "zorp - tab completion", "Tab completion for zorp scripts.",
            "# zorp - tab completion\n\nzorp completes the options of Python scripts in bash and zsh.\n\n"
            "If you're using multiple Python versions on the same system, the version being used to run "
            "the script must have zorp installed.\n\nPython scripts that call zorp.complete() get completion; zorp "
            "reads the Python parser of the script.\n\nZorp works with Python's argparse and with Python's optparse."
            "\n\nA Python virtual environment gets its own zorp hook.\n\n## Python Support\n\nZorp requires Python 3.9+.\n\n"
            "## License\n\nCopyright 2012-2023, the zorp authors. Licensed under the terms of the "
            "[Apache License, Version 2.0](http://www.apache.org/licenses/LICENSE-2.0).\n")
    kb = _kb(tmp_path, zorp)
    out = _ask_json(kb, "What is the minimum Python version for zorp?")
    assert "Python 3.9+" in out["answer"], out["answer"]



def test_an_issue_number_is_not_the_number_or_year_asked_for(tmp_path):
    """"#1362" in a changelog entry refers to an issue: it is neither the count a "how many"
    question asks for nor a year for "when"; the sentence stating "4 workers" comes first."""
    server = ("ops/frob-server.md", "Frob server", "The frob server.",
              "# Frob server\n\nThe frob server starts 4 workers per machine by default.\n\n## Changes\n\n"
              "- Start the frob server workers in order (#1362)\n\n## Notes\n\nThe frob server is small.\n")
    kb = _kb(tmp_path, server)
    out = _ask_json(kb, "How many workers does the frob server start?")
    assert "4 workers" in _first_bullet(out["answer"]), out["answer"]


def test_which_marker_is_answered_by_the_name_written_as_code(tmp_path):
    """"What marker ...?" asks for a name written as code, as "which option / decorator" do: the
    code that writes `# ZORP_COMPLETE_OK` is quoted, not only a sentence repeating "global
    completion" and "script"."""
    zorp = ("tools/zorp-complete.md", "zorp - tab completion", "Tab completion for zorp scripts.",
            "# zorp - tab completion\n\n## Synopsis\n\nAdd the `ZORP_COMPLETE_OK` marker and a call to "
            "`zorp.complete()` to your script as follows:\n\n```python\n#!/usr/bin/env python\n# ZORP_COMPLETE_OK\n"
            "import zorp\nzorp.complete()\n```\n\n## Activating global completion\n\nThe script "
            "activate-global-zorp installs the global completion script zorp-global into an appropriate "
            "location on your system for bash and for zsh, so that every script gets global completion.\n\n"
            "A script picked up by global completion should start quickly, so it is important to keep its "
            "imports light until the completion is done.\n")
    kb = _kb(tmp_path, zorp)
    out = _ask_json(kb, "What marker has to be in a script for zorp's global completion to pick it up?")
    assert "ZORP_COMPLETE_OK" in out["answer"], out["answer"]


def test_which_plural_gets_the_whole_list_not_its_announcement(tmp_path):
    """"Which checks must pass ...?" asks for all of them: the list is quoted whole with the sentence
    announcing it ("The following checks must pass before merging."), which alone shows nothing."""
    handbook = ("team/handbook.md", "Team handbook", "How the Orbit team works.",
                "# Team handbook\n\nWelcome to the Orbit team.\n\n## Code review\n\n"
                "Every change needs one approving review.\n\n"
                "The following checks must pass before merging. They run in CI on every push.\n\n"
                "- unit tests\n- lint\n- type check\n\n## Support rotation\n\n"
                "New hires shadow the support rotation first.\n")
    kb = _kb(tmp_path, handbook)
    out = _ask_json(kb, "Which checks must pass before merging?")
    _bullet_with(_first_bullet(out["answer"]), "must pass before merging", "unit tests", "lint", "type check")


def test_a_heading_leads_a_list_of_short_entries_but_not_a_changelog_or_long_items():
    """The whole-list unit under a heading is for an enumeration of short entries; a changelog's
    entries ("Fixed", "(#1362)") and long items are separate facts, quoted item by item."""
    from kb_ai.offline.units import page_units

    body = ("# Zorp\n\n### Reader-writer locks\n\n- Multiple readers (at the same time).\n"
            "- Single writers (blocking any readers).\n\n## Fixed\n\n- Fix socket port 0 (#975)\n"
            "- Replace the old server (#1362)\n\n## 0.11.0 (December 20, 2019)\n\n- Drop IOCP support.\n"
            "- Add the version flag.\n\n## Settings\n\n- `--reload` - Enable auto-reload. Zorp supports two "
            "versions of auto-reloading behaviour enabled by this option. Default: False.\n"
            "- `--reload-delay <float>` - Delay between two checks. Default: 0.25.\n")
    lists = [u.text for u in page_units("tools/zorp.md", "Zorp", body) if u.kind == "list"]
    assert lists == ["Reader-writer locks: Multiple readers (at the same time).; Single writers (blocking any readers)."]


def test_a_snake_case_name_meets_the_words_of_the_question(tmp_path):
    """"How do I drain the frob pool?": the page writes only `drain_pool()`; the parts of a
    snake_case name count as CamelCase parts do, so the line that shows it is quoted."""
    pool = ("ops/frob-pool.md", "Frob pool", "The frob worker pool.",
            "# Frob pool\n\nThe frob pool keeps workers warm.\n\n"
            "To empty it at once, call `drain_pool()` from any worker.\n\n"
            "A frob pool that is never used stays small.\n")
    kb = _kb(tmp_path, pool)
    out = _ask_json(kb, "How do I drain the frob pool?")
    _bullet_with(out["answer"], "drain_pool()")


def test_a_lead_in_is_quoted_with_the_short_code_it_introduces_never_alone(tmp_path):
    """"If you don't trust the input, you should use:" and its one-line block are one unit; the
    bare sentence (which shows nothing) is never quoted instead, even when another code block
    holds more of the question's words."""
    loader = ("libs/zorbyaml.md", "ZorbYAML", "A YAML parser.",
              "# ZorbYAML\n\nZorbYAML parses YAML documents.\n\n"
              "With the fast C bindings installed, you may load a YAML stream as follows:\n\n"
              "    >>> zorbyaml.load(stream, Loader=zorbyaml.CLoader)\n"
              "    >>> zorbyaml.load_all(stream, Loader=zorbyaml.CLoader)\n\n"
              "If you don't trust the input YAML stream, you should use:\n\n"
              "    >>> zorbyaml.guarded_read(stream)\n\n## Testing\n\nRun the tests with tox.\n")
    kb = _kb(tmp_path, loader)
    out = _ask_json(kb, "What should I use to load YAML that I don't trust?")
    assert "guarded_read" in out["answer"], out["answer"]
    assert "you should use: [" not in out["answer"], out["answer"]


def test_quotes_keep_the_pages_inline_code(tmp_path):
    """An offline answer shows inline code as the page wrote it: `__init__` stays code, not a
    bold "init" once rendered (issue 28 item 10); the citation's quote is the text as read."""
    kb = build_kb(tmp_path, ("python/classes.md", "Classes", "How classes keep their fields.",
                             "# Classes\n\nEvery class defines `__init__` to set up its fields, and `__dict__` holds them.\n"))
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "What holds the fields of an object?", "--json"],
                                env={"KAAS_MODEL": ""})
    data = json.loads(result.stdout)
    assert "`__init__`" in data["answer"] and "`__dict__` holds them" in data["answer"], data["answer"]
    assert any("__dict__ holds them" in (c.get("quote") or "") for c in data["citations"]), data["citations"]
