#!/usr/bin/env python3
"""Every path where two quantgate JSON reports (verify/release report.json, results.json)
differ, ignoring what differs between runs by design: timings, costs, peak RSS, throughput
figures, the operator and the paths of the run. Prints nothing and exits 0 when they agree.

Usage: scripts/report-diff.py A.json B.json
"""
import json, sys, re
IGN = re.compile(r'(^|\.)(costs|timings|load_ms|embed_ms|wall_s|cpu_s|seconds|tokens_per_second|llama_ms_per_text|created_unix_s|peak_rss_kib|max_rss_kib|run_dir|out|operator|started|finished|hostname|duration_s|elapsed_s|spread\d?|pp512_ts|tg128_ts|pp512_ratio|tg128_ratio|command|path)(\[[^\]]*\])?($|\.|\[)')
def walk(a, b, p, out):
    if IGN.search(p): return
    if type(a) != type(b): out.append((p, a, b)); return
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            walk(a.get(k, '<absent>'), b.get(k, '<absent>'), f"{p}.{k}" if p else k, out)
    elif isinstance(a, list):
        if len(a) != len(b): out.append((p + '.len', len(a), len(b))); return
        for i, (x, y) in enumerate(zip(a, b)): walk(x, y, f"{p}[{i}]", out)
    elif a != b: out.append((p, a, b))
a, b = (json.load(open(f)) for f in sys.argv[1:3])
out = []
walk(a, b, '', out)
for p, x, y in out: print(f"{p}: {str(x)[:150]!s} != {str(y)[:150]!s}")
sys.exit(1 if out else 0)
