#!/usr/bin/env python3
"""Planning model: decode time per step of Llama-3.1-405B (BF16) on 16 GPUs in 2 nodes, as
tp 8 x pp 2 (tensor parallel inside a node, pipeline stages across) against tp 16 across
both nodes. A model, not a measurement: it adds up weight streaming, all-reduces and the
stage-to-stage transfer with the inputs below, each of which a GPU session should replace
with its own measurement:
  --layer-ms T   one layer's decode step at tp 8 on one GPU, measured (bench_gpu_decode on a
                 synthetic llama geometry: step time / layers, scaled by the 405B layer's
                 bytes); default: weight bytes / (HBM bandwidth x efficiency)
  --nvlink-gbs, --ib-gbs   all-reduce bus bandwidth inside a node and per GPU across nodes
                 (bench_gpu_allreduce; nccl-tests busbw); --ar-us-intra, --ar-us-inter: the
                 all-reduce's fixed latency; --p2p-us: a send between nodes
Assumptions (the defaults): H100 SXM, HBM3 3.35 TB/s at 80% = 2.7 TB/s streamed; NVLink 4
all-reduce busbw 360 GB/s, 12 us latency; one 400 Gb/s NIC per GPU, all-reduce busbw across
2 nodes 40 GB/s per GPU, 40 us latency; activations F32 on the wire (tpd's residual stream;
BF16 would halve the bytes); KV reads ignored (short contexts);
a layer takes the longer of streaming its weights and its 2 flops per weight per token at
600 TFLOP/s (60% of the H100's dense BF16 peak; --tflops); compute and communication do
not overlap inside a layer; the pipeline's micro-batches are
equal, so stages stay busy in steady state (bubbles only at start and end).

Usage: bench/pp_plan.py [--batch 1,8,64,256,1024,4096] [--layer-ms T] [--nvlink-gbs 360] [--ib-gbs 40]
                        [--ar-us-intra 12] [--ar-us-inter 40] [--p2p-us 10] [--hbm-tbs 2.7]
"""
import argparse

# Llama-3.1-405B
LAYERS, DIM, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 126, 16384, 128, 8, 128, 53248, 128256
BYTES_W = 2  # BF16 weights
ACT = 4      # F32 activations on the wire


def layer_weight_bytes():
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return BYTES_W * (DIM * (q + 2 * kv) + q * DIM + 3 * DIM * FFN)


def allreduce_s(nbytes, ranks, busbw_gbs, lat_us):
    """Ring all-reduce: 2 (n-1)/n of the message per rank at the bus bandwidth, plus latency."""
    return lat_us * 1e-6 + 2 * (ranks - 1) / ranks * nbytes / (busbw_gbs * 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,8,64,256,1024,4096")
    ap.add_argument("--layer-ms", type=float, default=None, help="measured layer time at tp 8, batch 1 (ms)")
    ap.add_argument("--hbm-tbs", type=float, default=2.7)
    ap.add_argument("--nvlink-gbs", type=float, default=360)
    ap.add_argument("--ib-gbs", type=float, default=40)
    ap.add_argument("--ar-us-intra", type=float, default=12)
    ap.add_argument("--ar-us-inter", type=float, default=40)
    ap.add_argument("--p2p-us", type=float, default=10)
    ap.add_argument("--tflops", type=float, default=600)
    a = ap.parse_args()
    w = layer_weight_bytes()
    head = BYTES_W * VOCAB * DIM
    # weight streaming of one layer on one GPU at tp t (measured at tp 8 if given)
    stream8 = a.layer_ms * 1e-3 if a.layer_ms else w / 8 / (a.hbm_tbs * 1e12)

    def stream(t, tokens):
        return max(stream8 * 8 / t, tokens * 2 * w / BYTES_W / t / (a.tflops * 1e12))

    print(f"Llama-3.1-405B: {LAYERS} layers of {w / 1e9:.2f} GB (BF16), LM head {head / 1e9:.2f} GB; "
          f"one layer streams in {stream8 * 1e3:.3f} ms at tp 8"
          f"{' (measured)' if a.layer_ms else ' (HBM model)'}")
    print("tokens per step | tp8 x pp2: one batch in flight, tok/s | 2 micro-batches, tok/s | "
          "tp16: latency/step, tok/s | tp8xpp2 (micro-batches) / tp16")
    for b in [int(x) for x in a.batch.split(",")]:
        # tp 8 x pp 2: each stage 63 layers, two all-reduces per layer over NVLink
        mb = max(1, b // 2)  # two micro-batches of half the sequences each
        def stage(tokens):
            ar = allreduce_s(tokens * DIM * ACT, 8, a.nvlink_gbs, a.ar_us_intra)
            return LAYERS // 2 * (stream(8, tokens) + 2 * ar)
        p2p = a.p2p_us * 1e-6 + b * DIM * ACT / (a.ib_gbs * 1e9)
        lm = head / 8 / (a.hbm_tbs * 1e12)
        lat_pp = 2 * stage(b) + p2p + lm  # one batch through both stages
        # steady state: each stage runs one micro-batch while the other runs the other
        period = 2 * max(stage(mb), stage(b - mb) if b > 1 else 0) + lm
        thr_pp = b / period if b > 1 else 1 / lat_pp
        # tp 16: every layer's two all-reduces cross the nodes
        ar16 = allreduce_s(b * DIM * ACT, 16, a.ib_gbs, a.ar_us_inter)
        lat16 = LAYERS * (stream(16, b) + 2 * ar16) + head / 16 / (a.hbm_tbs * 1e12)
        thr16 = b / lat16
        print(f"{b:5d} | {lat_pp * 1e3:7.1f} ms, {b / lat_pp:7.0f} tok/s | {thr_pp:7.0f} tok/s | "
              f"{lat16 * 1e3:7.1f} ms, {thr16:7.0f} tok/s | {thr_pp / thr16:5.2f}x")


if __name__ == "__main__":
    main()
