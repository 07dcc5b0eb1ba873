import csv, json, math, sys, random
rows = json.load(open('labelled.json'))
def load(name):
    d = {}
    for r in csv.DictReader(open(f'{name}/scores.csv')):
        d[(int(r['id']), int(r['option']))] = r
    return d
def auc(xs, ys):
    pos = [x for x, y in zip(xs, ys) if y]; neg = [x for x, y in zip(xs, ys) if not y]
    s = 0.0
    for p in pos:
        for n in neg:
            s += 1.0 if p > n else 0.5 if p == n else 0.0
    return s / (len(pos) * len(neg))
def boot(xs, ys, n=1000):
    rng = random.Random(1); idx = list(range(len(xs))); out = []
    for _ in range(n):
        b = [rng.choice(idx) for _ in idx]
        yy = [ys[i] for i in b]
        if 0 < sum(yy) < len(yy):
            out.append(auc([xs[i] for i in b], yy))
    out.sort(); return out[int(0.025 * len(out))], out[int(0.975 * len(out))]
feats = {}
try:
    p = load('plain')
    pc = lambda i, o, k: float(p[(i, o)][k])
    feats['LL(cand|ctx) per char'] = [pc(i,0,'full')/pc(i,0,'choice_chars') for i in range(len(rows))]
    feats['LL(cand) - LL(gold), per char'] = [pc(i,0,'full')/pc(i,0,'choice_chars') - pc(i,1,'full')/pc(i,1,'choice_chars') for i in range(len(rows))]
    feats['PMI(cand; ctx) per char'] = [(pc(i,0,'full')-pc(i,0,'zero_prompt'))/pc(i,0,'choice_chars') for i in range(len(rows))]
    feats['PMI(cand) - PMI(gold), per char'] = [(pc(i,0,'full')-pc(i,0,'zero_prompt'))/pc(i,0,'choice_chars') - (pc(i,1,'full')-pc(i,1,'zero_prompt'))/pc(i,1,'choice_chars') for i in range(len(rows))]
except FileNotFoundError: pass
try:
    j = load('judge')
    feats['judge yes - no'] = [float(j[(i,0)]['full']) - float(j[(i,1)]['full']) for i in range(len(rows))]
except FileNotFoundError: pass
try:
    a = load('aftergold')
    feats['LL(cand|ctx,gold) - LL(cand|ctx), per char'] = [(float(a[(i,0)]['full']) - float(p[(i,0)]['full']))/pc(i,0,'choice_chars') for i in range(len(rows))]
    feats['LL(cand|ctx,gold) per char'] = [float(a[(i,0)]['full'])/pc(i,0,'choice_chars') for i in range(len(rows))]
except (FileNotFoundError, NameError): pass
import difflib
def words(s): return set(w.strip('.,!?').lower() for w in s.split())
feats['word overlap cand/gold (Jaccard)'] = [len(words(r['cand']) & words(r['gold'])) / max(1, len(words(r['cand']) | words(r['gold']))) for r in rows]
ys = [r['right'] for r in rows]
print(f"{len(rows)} labelled distractors, {sum(ys)} could be right")
reads = sorted(set(r['read'] for r in rows))
print(f"{'score':48s} {'AUC all':>8s} {'95% CI':>14s} " + " ".join(f"{n:>8s}" for n in reads))
for name, xs in feats.items():
    lo, hi = boot(xs, ys)
    per = []
    for n in reads:
        sel = [i for i, r in enumerate(rows) if r['read'] == n]
        per.append(auc([xs[i] for i in sel], [ys[i] for i in sel]))
    print(f"{name:48s} {auc(xs, ys):8.3f} [{lo:.3f}, {hi:.3f}] " + " ".join(f"{v:8.3f}" for v in per))
# fluent ones only: could-be-right among fluent distractors
sel = [i for i, r in enumerate(rows) if r['fluent']]
print(f"\nfluent only: {len(sel)} rows, {sum(ys[i] for i in sel)} could be right")
for name, xs in feats.items():
    print(f"{name:48s} {auc([xs[i] for i in sel], [ys[i] for i in sel]):8.3f}")

# Set aside the top q of fluent distractors by each score: could-be-right share among those kept.
print("\nfluent only: share could-be-right among those kept when the top q by the score are set aside")
for name, xs in feats.items():
    order = sorted(sel, key=lambda i: -xs[i])
    line = []
    for q in (0.0, 0.25, 0.5, 0.75):
        kept = order[int(q * len(order)):]
        line.append(f"q={q:.2f}: {sum(ys[i] for i in kept)}/{len(kept)} ({sum(ys[i] for i in kept)/len(kept):.0%})")
    print(f"{name:48s} " + "  ".join(line))
