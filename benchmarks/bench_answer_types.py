"""HotpotQA answer contains gold per question type (bridge, comparison, yes/no) and the precision
of the offline comparison verdicts (offline/compare.py), on the ``hp-full`` KB that
``bench_answers.py --work DIR`` builds:

    .venv/bin/python benchmarks/bench_answer_types.py [DIR]   (default /tmp/i15w)

Types: yes/no = gold answer yes or no; comparison = "..., A or B?"; bridge = the rest. A verdict is
right when the subject it names is the gold answer (every word of it in the gold: "Virginia
Woolf" for "Adeline Virginia Woolf") or, for yes/no, when it says "Yes" and the gold is yes.
"""
import sys, json, asyncio, re
from pathlib import Path
from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.quality.scoring import score_answer
rows = [json.loads(l) for l in open('/work/shared/eval-data/hotpotqa-dev500/questions.jsonl')]
service = build_service(load_settings(Path(sys.argv[1] if len(sys.argv) > 1 else '/tmp/i15w') / 'hp-full', env={}))
def qtype(r):
    if r['answer'].lower() in ('yes', 'no'): return 'yes/no'
    if re.search(r'\bor\b', r['question']) and re.search(r',|:', r['question']): return 'comparison'
    return 'bridge'
stats = {}; verdicts = []
for r in rows:
    res = asyncio.run(ask(service, AskRequest(question=r['question'])))
    sc = score_answer(res.answer, [r['answer'], *r['answer_aliases']])
    t = qtype(r)
    s = stats.setdefault(t, [0, 0]); s[0] += 1; s[1] += sc.contains_gold
    m = re.search(r"^(Yes: .*|.*\(Derived from the quoted passages\.\)|Both dates quoted.*)$", res.answer, re.M)
    if m:
        line = m.group(1)
        head = line.split(',')[0].split(':')[0]
        from kb_ai.quality.scoring import normalize_answer as na
        correct = bool(na(head) and (set(na(head).split()) <= set(na(r['answer']).split()) or na(r['answer']) in na(head))) if r['answer'].lower() not in ('yes','no') else (r['answer'].lower()=='yes' and line.startswith('Yes'))
        if line.startswith('Both dates'): correct = None
        verdicts.append((t, correct, r['answer'], line[:150], r['question']))
for t, (n, c) in stats.items(): print(f"{t}: {c:.0f}/{n} = {c/n*100:.1f}%")
tot = sum(c for n, c in stats.values()); print(f"all: {tot:.0f}/500 = {tot/5:.1f}%")
right = sum(v[1] is True for v in verdicts); wrong = sum(v[1] is False for v in verdicts); nov = sum(v[1] is None for v in verdicts)
for t in ('comparison','yes/no'):
    print(t, 'verdicts right', sum(v[1] is True for v in verdicts if v[0]==t), 'wrong', sum(v[1] is False for v in verdicts if v[0]==t))
print(f"verdicts: {right} right, {wrong} wrong, {nov} undecided (same year)")
for v in verdicts: print("  ", v)
