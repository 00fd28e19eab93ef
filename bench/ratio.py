"""Per-round ratios of sluice to the fastest keyed peer of that round.

    python3 ratio.py results-memstore-5.txt

Reads `go test -bench BenchmarkAllow -count N` output in which each round
ran sluice and some keyed peers (xtime, sethvargo, ulule, httprate,
throttled) seconds apart, and prints a Markdown row per case: sluice's
median ns/op, the peer with the lowest median, every round's ratio and
their median.
"""
import re
import statistics as st
import sys

rows=[]
for line in open(sys.argv[1]):
    m=re.match(r'BenchmarkAllow/keys=(\d+)/path=(\w+)/mode=(\w+)/lib=([\w-]+)-\d+\s+\d+\s+([\d.]+) ns/op',line)
    if m: rows.append(m.groups())
peers=['xtime','sethvargo','ulule','httprate','throttled']
cases=[]; data={}
rnd={}
for k,p,mo,lib,ns in rows:
    c=(k,p,mo)
    if c not in cases: cases.append(c)
    key=(c,lib); rnd[key]=rnd.get(key,0)+1
    data.setdefault(c,{}).setdefault(rnd[key],{})[lib]=float(ns)
print("| case | sluice ns (median) | fastest peer (median ns) | per-round sluice/fastest peer | median | median ≤ 0.8x |")
print("|---|---:|---|---|---:|---|")
for c in cases:
    rs=[];sl=[];best={}
    for r,d in sorted(data[c].items()):
        if 'sluice' not in d: continue
        pv={l:d[l] for l in peers if l in d}
        if not pv: continue
        b=min(pv,key=pv.get); rs.append(d['sluice']/pv[b]); sl.append(d['sluice'])
        for l in pv: best.setdefault(l,[]).append(pv[l])
    med={l:st.median(v) for l,v in best.items()}
    fb=min(med,key=med.get)
    mr=st.median(rs)
    print(f"| {c[0] if c[0]=='1' else '100k'}/{c[1]}/{c[2]} | {st.median(sl):.0f} | {fb} {med[fb]:.0f} | {' '.join(f'{x:.2f}' for x in rs)} | {mr:.2f}x | {'yes' if mr<=0.8 else 'no'} |")
