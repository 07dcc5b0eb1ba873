# Builds the three HellaSwag-layout datasets `af eval` scored for
# docs/notebook/2026-12-05-could-be-right-lm-judgement.md from labelled.json (the blind reads'
# cases and verdicts: ActivityNet captions, so not committed; one object per case with read,
# context, subject, gold, cand, right, fluent). Option 0 is the candidate.
import json
rows = json.load(open('labelled.json'))
def write(name, make):
    with open(name, 'w') as f:
        for i, r in enumerate(rows):
            ctx_a, ctx_b, endings = make(r)
            f.write(json.dumps(dict(ind=i, ctx_a=ctx_a, ctx_b=ctx_b, endings=endings, label=0,
                                    split='val', source_id=r['read'])) + '\n')
# The candidate and the gold after the context and subject (full), after the subject alone
# (zero-prompt) and alone (choices-only).
write('plain.jsonl', lambda r: (r['context'], r['subject'], [r['cand'], r['gold']]))
# The same LM asked, with the gold shown, whether the candidate could have happened instead.
def judge(r):
    a, b = f"{r['subject']} {r['gold']}", f"{r['subject']} {r['cand']}"
    return (f"{r['context']}\nWhat happens next: {a}\nCould this have happened next instead: {b}\n"
            "Answer (yes or no):", "", [" yes", " no"])
write('judge.jsonl', judge)
# The candidate after the gold has been told, restated.
write('aftergold.jsonl', lambda r: (f"{r['context']} {r['subject']} {r['gold']}",
                                    "In other words, " + r['subject'][0].lower() + r['subject'][1:],
                                    [r['cand'], r['gold']]))
