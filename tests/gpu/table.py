#!/usr/bin/env python3
"""The short table tests/gpu/run prints last: every check's status (from the JSON lines of
the checks) and every benchmark as a ratio to the floors measured in the same run
(streaming-read bandwidth, D2D copy, cuBLAS BF16 GEMM), from the BENCH lines of the logs.

Usage: table.py RESULTS.jsonl LOG...      Exit status 1 if a check failed.
       table.py --short RESULTS.jsonl LOG...   what the device tool's 12,000-character tail
                                          should hold: per step its counts, every check not
                                          passed with its detail, the benchmarks against floors
       table.py --results-md LOG...       the decode figures as lines for bench/RESULTS.md
                                          ($TPD_GPU_NAME, $TPD_COMMIT name the machine and commit)"""
import datetime
import json
import os
import re
import sys


def bench_lines(paths):
    out = []
    for p in paths:
        try:
            for line in open(p, errors="replace"):
                m = re.match(r"BENCH (\S+) (.*)", line.strip())
                if m:
                    kv = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
                    out.append((m.group(1), kv))
        except OSError:
            pass
    return out


def floors(benches):
    floor = {}
    for kind, kv in benches:
        if kind == "stream_read":
            floor["read"] = float(kv["GBps"])
        elif kind == "d2d_copy":
            floor["copy"] = float(kv["GBps"])
        elif kind == "gemm_bf16":
            floor["gemm"] = float(kv["TFLOPs"])
    return floor


def results_md(paths):
    """A section for bench/RESULTS.md: decode on the synthetic model as a ratio to the
    streaming-read floor of the same run. Prints nothing (exit 1) without both."""
    benches = bench_lines(paths)
    floor = floors(benches)
    rows = [kv for kind, kv in benches if kind == "decode"]
    if "read" not in floor or not rows:
        return 1
    gpu = os.environ.get("TPD_GPU_NAME", "GPU (fill in)")
    commit = os.environ.get("TPD_COMMIT") or "(fill in)"
    day = datetime.date.today().isoformat()
    print(f"## GPU decode on synthetic weights vs the streaming-read floor ({gpu})")
    print("`tests/gpu/run --steps bench` (bench_gpu_bandwidth, then `mpirun --bind-to none -np 1 "
          "bench_gpu_decode --model llama3-8b:bf16 --batch 1,8,64 --ctx 512 --steps 32`): bytes of weights and "
          "KV cache read per decode step over its time, as a share of a read-only streaming kernel's bandwidth "
          f"measured in the same run ({floor['read']:.0f} GB/s).")
    print()
    print("| date | commit | GPU | model | batch | ctx | tok/s | ms/step | streamed GB/s | of the read floor | picks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kv in rows:
        bw = float(kv["stream_GBps"])
        print(f"| {day} | {commit} | {gpu} | {kv['model']} tp{kv['tp']} | {kv['batch']} | {kv['ctx']} | "
              f"{float(kv['tok_s']):.1f} | {kv['ms_step']} | {bw:.0f} | **{bw / floor['read']:.2f}x** |"
              + (" GEMM table |" if kv.get("gemm") == "tuned" else " |"))
    return 0


def short(results):
    """Per step: counts; then every check that did not pass, detail cut to 240 characters."""
    steps = {}
    for r in results:
        steps.setdefault(r.get("step") or "-", []).append(r)
    print("\n" + "=" * 100)
    for st, rs in steps.items():
        n = {k: sum(1 for r in rs if r["status"] == k) for k in ("PASS", "FAIL", "SKIP")}
        skips = sorted({r.get("detail", "") for r in rs if r["status"] == "SKIP"})
        print(f"step {st}: {n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped"
              + (f" ({'; '.join(skips)[:160]})" if skips else ""))
    for r in results:
        if r["status"] == "FAIL":
            print(f"  FAIL {r['name']}: {r.get('detail', '')[:240]}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--results-md":
        return results_md(sys.argv[2:])
    brief = len(sys.argv) > 1 and sys.argv[1] == "--short"
    if brief:
        del sys.argv[1]
    results = []
    if len(sys.argv) > 1:
        try:
            results = [json.loads(ln) for ln in open(sys.argv[1]) if ln.strip()]
        except OSError:
            pass
    benches = bench_lines(sys.argv[2:])
    rows = [(r["name"], r["status"], r.get("detail", "")) for r in results]
    floor = floors(benches)
    if "read" in floor:
        rows.append(("floor: streaming read", "", f"{floor['read']:.0f} GB/s"))
    if "copy" in floor:
        rows.append(("floor: D2D copy (read+write)", "", f"{floor['copy']:.0f} GB/s"))
    if "gemm" in floor:
        rows.append(("floor: cuBLAS BF16 GEMM", "", f"{floor['gemm']:.0f} TFLOP/s"))
    for kind, kv in benches:
        if kind == "decode":
            bw = float(kv["stream_GBps"])
            ratio = f", {100 * bw / floor['read']:.0f}% of streaming read" if "read" in floor else ""
            status = ""
            if kv["batch"] == "1" and "read" in floor:
                status = "PASS" if bw >= 0.75 * floor["read"] else "BELOW"
            tuned = " (GEMM table)" if kv.get("gemm") == "tuned" else ""
            rows.append((f"decode {kv['model']} tp{kv['tp']} batch {kv['batch']} ctx {kv['ctx']}{tuned}", status,
                         f"{float(kv['tok_s']):.1f} tok/s, {kv['ms_step']} ms/step, {bw:.0f} GB/s{ratio}"))
        elif kind == "prefill":
            tf = float(kv["TFLOPs"])
            ratio = f", {100 * tf / floor['gemm']:.0f}% of GEMM peak" if "gemm" in floor else ""
            tuned = " (GEMM table)" if kv.get("gemm") == "tuned" else ""
            rows.append((f"prefill {kv['model']} tp{kv['tp']} {kv['tokens']} tokens{tuned}", "",
                         f"{float(kv['tok_s']):.0f} tok/s, {tf:.0f} TFLOP/s{ratio}"))
        elif kind == "allreduce":
            rows.append((f"all-reduce {kv['comm']} {kv['ranks']} ranks {int(kv['bytes']) // 1024} KiB",
                         "PASS" if kv.get("check") == "ok" else "FAIL",
                         f"{float(kv['us']):.1f} us, bus {float(kv['busbw_GBps']):.1f} GB/s"))
    if brief:
        short(results)
        rows = rows[len(results):]  # the benchmarks and floors alone below
    w = max([len(r[0]) for r in rows] + [10])
    if rows or not brief:
        print("\n" + "=" * 100)
        print(f"{'check / benchmark':<{w}}  {'status':<6}  detail")
        print("-" * 100)
        for name, status, detail in rows:
            print(f"{name:<{w}}  {status:<6}  {detail[:200]}")
    n_fail = sum(1 for r in results if r["status"] == "FAIL")
    n_pass = sum(1 for r in results if r["status"] == "PASS")
    print("-" * 100)
    print(f"{n_pass} passed, {n_fail} failed, {sum(1 for r in results if r['status'] == 'SKIP')} skipped")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
